#!/usr/bin/env bash
# Vision-language training with a parallel strategy per module computes the same run as one
# process: the vision encoder (vision.parallel.*: its own dp x sp x tp and ZeRO stage) and the
# text decoder (parallel.*) each split their own way, vision tokens handed to the text ranks
# and their gradients handed back. Same per-step losses and same final weights (every tensor
# of both modules) as the single-process run, from the same initial weights and data.
#
# An MoE text decoder (model.moe.*) trains the same way, its routed experts split over
# parallel.ep of the text dp ranks, the encoder collocated or on ranks of its own, or (the
# seed's Qwen3-VL-MoE shape) the encoder in Ulysses sp=2 and the text in tp=2 with the experts
# folded whole on the same two ranks (etp=1, ep=2), or the text in pp=2 x dp=2 with ep=2 (the
# router statistics travelling between the stages).
#
# The validation loss on the val split (every 2 steps and at the end; forward-only, the encoder
# on its ranks handing tokens over as in training) equals one process's too.
#
# Tolerances as in equivalence_test.sh and for the same reasons (fp32 sums reordered by the
# split: ~1e-7 relative per reduction): per-step loss 1e-5 relative, final weights 1e-4
# relative norm per tensor (AdamW turns rounding-level gradient differences of near-zero
# elements into update differences of up to lr). A missing reduction, a wrong slice or a lost
# hand-off moves the losses by > 1e-3.
. "$(dirname "$0")/parallel_common.sh"
SPLIT_CHECK=${2:?usage: $0 path/to/loom path/to/model_vision_split_check}

echo "the encoder alone, split over its own ranks, against the whole encoder (tokens, gradients)"
for args in "tiny-qwen2.5-vl 2 1" "tiny-qwen2.5-vl 1 2" "small-qwen2.5-vl 2 1" "small-qwen2.5-vl 1 2" "small-qwen2.5-vl 2 2" \
    "tiny-llava 2 1" "tiny-llava 1 2"; do
  set -- $args
  if out=$(timeout 120 "${MPIRUN[@]}" -np $(($2 * $3)) "$SPLIT_CHECK" $args 2>&1); then
    pass; echo "  $(echo "$out" | grep "gradient tensors")"
  else fail "vision split $args: $(echo "$out" | grep FAIL | head -3)"; fi
done

{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 104 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 12,1,0; } >"$WORK/synth.log" 2>&1 ||
  { echo "could not make the VQA data"; cat "$WORK/synth.log"; exit 1; }

VLM=(model.preset=tiny-qwen2.5-vl model.vocab_size=384 training.seq_len=48 training.steps=4
  training.warmup_steps=1 training.lr=2e-3 data.format=vqa data.vqa_path="$WORK/vqa"
  data.tokenizer="$WORK/vqa/tokenizer.json" data.image_min_pixels=12544
  data.image_max_pixels=12544 checkpoint.every=0 training.eval_every=2)
# the answer accuracy at the end is computed in every layout (directly when the text decoder
# is only data parallel, else by rank 0 from the final checkpoint): same samples, same result
same_eval() {
  local a b
  a=$(grep -o '"val_[a-z]*": [0-9.]*' "$(run_dir "$1")/summary.json" | tr '\n' ' ')
  b=$(grep -o '"val_[a-z]*": [0-9.]*' "$(run_dir "$2")/summary.json" | tr '\n' ' ')
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass; else fail "$2: answer accuracy '$b', one process '$a'"; fi
}
check_case() { # name np overrides...
  local name=$1 np=$2; shift 2
  train "$name" "$np" "$@" && { close_losses v_single "$name" 1e-5; close_weights v_single "$name" 1e-4
    same_eval v_single "$name"; close_val_losses v_single "$name" 1e-5; }
}

echo "tiny Qwen2.5-VL, 2 micro-batches of 4 samples per step"
train v_single 1 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2
# the seed's winning combination: vision Ulysses + ZeRO-1, text tensor parallel
check_case v_sp2_zero1__text_tp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1
check_case v_sp2_dp2_zero1__text_tp2_dp2 4 "${VLM[@]}" training.micro_batch_size=2 training.grad_accum=2 \
  parallel.dp=2 parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1
# uniform strategies for comparison
check_case v_uniform_tp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2
check_case v_uniform_zero3_dp2 2 "${VLM[@]}" training.micro_batch_size=2 training.grad_accum=2 \
  parallel.dp=2 parallel.zero=3
# text pipeline: the encoder runs on the first stage (its forward recomputed for the 1F1B backward)
check_case v_text_pp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=2
check_case v_sp2__text_pp2_ulysses2 4 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.pp=2 parallel.sp=2 vision.parallel.sp=2
# more mixes: vision tp against text Ulysses, vision on one rank feeding two text ranks,
# Megatron sequence parallelism, ZeRO-2 on the vision replicas only
check_case v_tp2__text_ulysses2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.sp=2 vision.parallel.tp=2
check_case v_one_rank__text_tp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.tp=2 vision.parallel.tp=1 vision.parallel.sp=1
check_case v_sp2__text_tp2_megatron_sp 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.tp=2 parallel.sp_mode=megatron vision.parallel.sp=2
check_case v_dp2_zero2__text_dp2 2 "${VLM[@]}" training.micro_batch_size=2 training.grad_accum=2 \
  parallel.dp=2 vision.parallel.zero=2
# separate rank sets: the encoder on ranks of its own after the text decoder's
check_case v_separate_1__text_tp2 3 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.tp=2 vision.parallel.placement=separate vision.parallel.tp=1
check_case v_separate_sp2_zero1__text_pp2 4 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 \
  parallel.pp=2 vision.parallel.placement=separate vision.parallel.sp=2 vision.parallel.zero=1
check_case v_separate_dp2_zero3__text_dp2_zero1 4 "${VLM[@]}" training.micro_batch_size=2 training.grad_accum=2 \
  parallel.dp=2 parallel.zero=1 vision.parallel.placement=separate vision.parallel.zero=3

echo "an MoE text decoder (4 experts, top 2) under the encoder, its experts split over ep=2"
MOEV=("${VLM[@]}" model.moe.experts=4 model.moe.top_k=2 model.moe.intermediate=64 training.micro_batch_size=2)
train m_single 1 "${MOEV[@]}" training.grad_accum=4
for c in "m_dp2_zero1__text_ep2_zero1|parallel.dp=2 parallel.ep=2 parallel.zero=1 vision.parallel.zero=1" \
    "m_sp2_zero1__text_tp2_ep2_folded|parallel.tp=2 parallel.etp=1 parallel.ep=2 vision.parallel.sp=2 vision.parallel.zero=1" \
    "m_separate_dp2__text_ep2|parallel.dp=2 parallel.ep=2 vision.parallel.placement=separate vision.parallel.zero=2" \
    "m_dp2__text_pp2_ep2|parallel.pp=2 parallel.dp=2 parallel.ep=2"; do
  name=${c%%|*} np=2 ga=2 # text dp=2: 2 micro-batches each (tp=2, dp=1: 4)
  case $name in *separate* | *pp2*) np=4 ;; *folded*) ga=4 ;; esac
  # shellcheck disable=SC2086
  train "$name" $np "${MOEV[@]}" training.grad_accum=$ga ${c#*|} && { close_losses m_single "$name" 1e-5
    close_weights m_single "$name" 1e-4; close_val_losses m_single "$name" 1e-5; }
done

echo "tiny LLaVA (learned positions, projector, fixed 112 px images, 1D positions)"
LLAVA=("${VLM[@]}" model.preset=tiny-llava training.seq_len=96 training.micro_batch_size=4
  training.grad_accum=2)
train l_single 1 "${LLAVA[@]}"
for c in "l_v_sp2_zero1__text_tp2|parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1" \
    "l_uniform_tp2|parallel.tp=2"; do
  name=${c%%|*}
  # shellcheck disable=SC2086
  train "$name" 2 "${LLAVA[@]}" ${c#*|} && { close_losses l_single "$name" 1e-5
    close_weights l_single "$name" 1e-4; same_eval l_single "$name"; close_val_losses l_single "$name" 1e-5; }
done

echo "loom eval of a vision-language checkpoint, in the layout it was written in and in others"
vsep=$(run_dir v_separate_sp2_zero1__text_pp2)
run_val=$(val_losses "$vsep" | tail -1 | cut -d' ' -f2)
eval_val() { "$LOOM" eval "$@" --json 2>"$WORK/eval.err" | sed -n 's/.*"val_loss": \([^,]*\),.*/\1/p'; }
same=$(eval_val "$vsep/final_checkpoint" --nproc 4)
check "loom eval in the run's layout (encoder separate, text pp2) = its last val loss, every digit" \
  test -n "$same" -a "$same" = "$run_val"
for layout in "1" "2 parallel.pp=1 parallel.tp=2 vision.parallel.placement=collocated vision.parallel.sp=2" \
    "3 parallel.pp=1 parallel.tp=2 vision.parallel.sp=1 vision.parallel.tp=1"; do
  set -- $layout
  np=$1; shift
  if [ "$np" = 1 ]; then other=$(eval_val "$vsep/final_checkpoint" parallel.pp=1 vision.parallel.placement=collocated vision.parallel.sp=0 vision.parallel.zero=-1)
  else other=$(eval_val "$vsep/final_checkpoint" --nproc "$np" "$@"); fi
  if [ -n "$other" ] && awk -v a="$other" -v b="$run_val" 'BEGIN { r = (a - b) / b; if (r < 0) r = -r; exit !(r <= 1e-5) }'; then
    pass; echo "  $np rank(s) $*: $other (run $run_val)"
  else fail "loom eval on $np ranks $*: '$other', run $run_val: $(tail -2 "$WORK/eval.err")"; fi
done

echo "checkpoints of both modules reshard: written as vision sp2 ZeRO-1 + text tp2, resumed elsewhere"
R=("${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 training.steps=6 checkpoint.every=3)
train rs_straight 1 "${R[@]}"
train rs_src 2 "${R[@]}" parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1 --stop-after 3
src=$(run_dir rs_src)
check "both modules' files are listed in the index" grep -q "vision-optimizer-r00001.safetensors" "$src/checkpoint_3/index.json"
resume_as() { # name np overrides...: resume the interrupted run in another layout: a new run
  local name=$1 np=$2; shift 2 # (named $name) forked at step 3, its metrics from step 4
  local ck="$src/checkpoint_3"
  if [ "$np" = 1 ]; then "$LOOM" train --resume "$ck" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1
  else timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train --resume "$ck" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1; fi ||
    { fail "$name: resume failed"; tail -5 "$WORK/$name.log" >&2; return; }
  close_losses rs_straight "$name" 1e-5 3
}
resume_as rs_one_process 1 parallel.tp=1 vision.parallel.sp=0 vision.parallel.zero=-1
resume_as rs_uniform_zero3 2 parallel.tp=1 parallel.dp=2 parallel.zero=3 vision.parallel.sp=0 \
  vision.parallel.zero=-1 training.micro_batch_size=2
cp -r "$src" "$WORK/copy_rs_same_layout" # same layout, same config: the run continues
timeout 300 "${MPIRUN[@]}" -np 2 "$LOOM" train --resume "$WORK/copy_rs_same_layout/checkpoint_3" --quiet \
  >"$WORK/rs_same_layout.log" 2>&1 || { fail "rs_same_layout: resume failed"; tail -5 "$WORK/rs_same_layout.log" >&2; }
train rs_src_straight 2 "${R[@]}" parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1
if [ "$(losses "$WORK/copy_rs_same_layout")" = "$(losses "$(run_dir rs_src_straight)")" ]; then pass; else
  fail "same-layout VLM resume is not bitwise identical"; fi

echo "bad strategies are refused before any work, naming the keys"
expect_error() { # name np message overrides...
  local name=$1 np=$2 msg=$3; shift 3
  if run_cmd timeout 120 "${MPIRUN[@]}" -np "$np" "$LOOM" train "${VLM[@]}" "$@" \
      run.output_dir="$WORK/bad" --quiet; then fail "$name: expected an error"; run_show; return; fi
  if grep -q -- "$msg" <<<"$RUN_OUT"$'\n'"$RUN_ERR"; then pass; else fail "$name: no '$msg' in its output"; run_show; fi
}
expect_error bad_heads 2 "must divide the vision encoder's 2 heads" training.micro_batch_size=4 \
  parallel.tp=2 vision.parallel.sp=2 vision.parallel.tp=2
expect_error bad_dp 2 "vision.parallel.dp (1) must equal parallel.dp (2)" training.micro_batch_size=2 \
  parallel.dp=2 vision.parallel.dp=1
expect_error bad_groups 4 "must equal the text decoder's tp\*sp" training.micro_batch_size=2 \
  parallel.dp=2 parallel.tp=2 vision.parallel.tp=1 vision.parallel.sp=1
expect_error bad_separate_count 2 "make 3, but 2 ranks were started; start 3" training.micro_batch_size=4 \
  parallel.tp=2 vision.parallel.placement=separate vision.parallel.tp=1
expect_error bad_placement 1 "vision.parallel.placement must be one of collocated, separate" \
  training.micro_batch_size=4 vision.parallel.placement=elsewhere
expect_error bad_zero 1 "vision.parallel.zero = 4 is out of range" training.micro_batch_size=4 \
  vision.parallel.zero=4
expect_error bad_sp 1 "vision.parallel.sp = -2 is out of range" training.micro_batch_size=4 \
  vision.parallel.sp=-2
[ -d "$WORK/bad" ] && fail "a refused run left a run directory" || pass
finish
