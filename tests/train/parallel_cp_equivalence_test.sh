#!/usr/bin/env bash
# Context parallelism (parallel.cp, ring attention) computes the same training run as one
# process, alone and combined with tensor, data (ZeRO) and pipeline parallelism: same per-step
# losses, validation losses and final weights. GPT-2 checks the learned positions of each
# chunk's tokens, Llama (GQA, 4 heads / 2 kv heads) the rotary positions and grouped heads.
#
# Tolerances are those of equivalence_test.sh, for the same reason: the layout changes only
# the order of floating-point sums (here also the log-sum-exp merge of the ring's partial
# attention results and the cp gradient reduction), fp32 rounding ~1e-7 relative per
# reduction: per-step loss 1e-5 relative, final weights 1e-4 relative norm per tensor; bf16
# 2e-3 on losses (a rounding flip of a bf16 matmul input propagates), 2e-2 on weights. A wrong
# chunk, mask, position or a missing cp reduction moves losses by > 1e-3.
#
# Layouts the trainer does not implement are refused before any work starts, with the reason.
. "$(dirname "$0")/parallel_common.sh"
SPLIT_CHECK=${2:?usage: $0 path/to/loom path/to/model_vision_split_check}
make_data || { echo "could not make test data"; exit 1; }

GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=4 training.warmup_steps=2
  data.train_shards="$WORK/train.bin" checkpoint.every=0 data.val_fraction=0.1
  training.eval_every=2 training.eval_batches=2)
LLAMA=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=2
  model.hidden=64 model.heads=4 model.kv_heads=2 model.intermediate=96 training.seq_len=32
  training.steps=4 training.warmup_steps=2 data.train_shards="$WORK/train.bin"
  data.val_fraction=0.1 training.eval_every=2 training.eval_batches=2)
FP32=1e-5 W32=1e-4 BF16=2e-3

check_case() { # name np overrides...
  local name=$1 np=$2; shift 2
  train "$name" "$np" "$@" && { close_losses "$BASE" "$name" "$TOL"; close_weights "$BASE" "$name" "$WTOL"
    close_val_losses "$BASE" "$name" "$TOL"; }
}

echo "GPT-2 (learned positions), 2 micro-batches of 4 sequences per step"
train g_single 1 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2
BASE=g_single TOL=$FP32 WTOL=$W32
check_case g_cp2 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2
check_case g_cp2_tp2 4 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2 parallel.tp=2
check_case g_cp2_dp2_pp2 8 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.cp=2 parallel.dp=2 parallel.pp=2

echo "Llama GQA (rotary positions), 3 micro-batches of 4 sequences per step"
train l_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3
BASE=l_single
check_case l_cp2 2 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.cp=2
check_case l_cp4 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.cp=4
check_case l_cp2_tp2 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.cp=2 parallel.tp=2
check_case l_cp2_tp2_megatron_sp 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.cp=2 parallel.tp=2 parallel.sp_mode=megatron
check_case l_cp2_dp2_zero1 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.cp=2 parallel.dp=2 parallel.zero=1
check_case l_cp2_dp2_zero3 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.cp=2 parallel.dp=2 parallel.zero=3
check_case l_cp2_dp2_pp2 8 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.cp=2 parallel.dp=2 parallel.pp=2

echo "Ulysses inside context parallelism (all-to-all within each cp rank's two chunks, then the ring"
echo "over H/sp heads): cp2 x sp2, and cp2 x sp3 whose Ulysses slices straddle the chunk boundary"
check_case l_cp2_sp2 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.cp=2 parallel.sp=2
L6=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=2
  model.hidden=96 model.heads=6 model.kv_heads=3 model.intermediate=96 model.max_seq=64
  training.seq_len=48 training.steps=3 training.warmup_steps=1 data.train_shards="$WORK/train.bin"
  checkpoint.every=0 training.micro_batch_size=2 training.grad_accum=2)
train l6_single 1 "${L6[@]}"
BASE=l6_single
check_rows() { train "$1" "$2" "${@:3}" && { close_losses "$BASE" "$1" "$TOL"; close_weights "$BASE" "$1" "$WTOL"; }; }
check_rows l6_cp2_sp3 6 "${L6[@]}" parallel.cp=2 parallel.sp=3
BASE=l_single

echo "loom eval of a cp2 checkpoint in its own layout (2 ranks) and in one process: same loss (1e-5)"
ev() { "$LOOM" eval "$(run_dir l_cp2)/final_checkpoint" --data "$WORK/train.bin" --batches 3 --json "$@" 2>"$WORK/eval.err" |
  sed -n 's/.*"val_loss": \([0-9.]*\).*/\1/p'; }
e2=$(ev --nproc 2) e1=$(ev parallel.cp=1)
if [ -n "$e1" ] && [ -n "$e2" ] && awk -v a="$e1" -v b="$e2" 'BEGIN { r = (a - b) / a; if (r < 0) r = -r; exit !(r <= 1e-5) }'; then
  pass; echo "  eval: cp2 $e2, one process $e1"
else fail "eval of the cp2 checkpoint: cp2 '$e2', one process '$e1' ($(tail -2 "$WORK/eval.err"))"; fi

echo "resume: a checkpoint written by cp2 x dp2 ZeRO-1 resumed in other layouts (1e-5) and in its own (bitwise)"
train l_cp_src 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.cp=2 parallel.dp=2 parallel.zero=1 checkpoint.every=2 --stop-after 2
src=$(run_dir l_cp_src)
resume_as() { # name np overrides...: resume the interrupted run in another layout: a new run
  local name=$1 np=$2; shift 2 # (named $name) forked at step 2, its metrics from step 3
  local ck="$src/checkpoint_2"
  if [ "$np" = 1 ]; then "$LOOM" train --resume "$ck" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1
  else timeout 300 "${MPIRUN[@]}" -np "$np" "$LOOM" train --resume "$ck" run.name="$name" "$@" --quiet >"$WORK/$name.log" 2>&1; fi ||
    { fail "$name: resume failed"; tail -5 "$WORK/$name.log" >&2; return; }
  close_losses l_single "$name" 1e-5 2
}
resume_as l_resume_one_process 1 parallel.cp=1 parallel.dp=1 parallel.zero=0 training.micro_batch_size=4
resume_as l_resume_cp4 4 parallel.cp=4 parallel.dp=1 parallel.zero=0 training.micro_batch_size=4
# same layout, same config: the interrupted run itself continues (in a copy, its own id)
cp -r "$src" "$WORK/runs/l_resume_same_run"
timeout 300 "${MPIRUN[@]}" -np 4 "$LOOM" train --resume "$WORK/runs/l_resume_same_run/checkpoint_2" --quiet \
  >"$WORK/l_resume_same.log" 2>&1 || { fail "l_resume_same: resume failed"; tail -5 "$WORK/l_resume_same.log" >&2; }
close_losses l_single l_resume_same 1e-5
train l_cp_straight 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.cp=2 parallel.dp=2 parallel.zero=1 checkpoint.every=2
if [ "$(losses "$(run_dir l_cp_straight)")" = "$(losses "$WORK/runs/l_resume_same_run")" ]; then pass
  echo "  l_resume_same: losses bitwise equal to the uninterrupted cp2 x dp2 run"
else fail "cp2 same-layout resume is not bitwise identical"; fi

echo "bf16 with activation checkpointing"
train lb_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true
BASE=lb_single TOL=$BF16 WTOL=2e-2
check_case lb_cp2 2 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true parallel.cp=2

echo "tiny Qwen2.5-VL: text decoder context parallel (M-RoPE positions of each chunk's tokens,"
echo "vision tokens handed to the cp ranks holding their placeholders), 2 micro-batches of 4"
{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 104 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 12,1,0; } >"$WORK/synth.log" 2>&1 ||
  { echo "could not make the VQA data"; cat "$WORK/synth.log"; exit 1; }
VLM=(model.preset=tiny-qwen2.5-vl model.vocab_size=384 training.seq_len=48 training.steps=4
  training.warmup_steps=1 training.lr=2e-3 data.format=vqa data.vqa_path="$WORK/vqa"
  data.tokenizer="$WORK/vqa/tokenizer.json" data.image_min_pixels=12544
  data.image_max_pixels=12544 checkpoint.every=0 training.eval_every=2)
train v_single 1 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2
BASE=v_single TOL=$FP32 WTOL=$W32
check_case v_text_cp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2
check_case v_sp2__text_cp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2 vision.parallel.sp=2
check_case v_tp2__text_cp2_tp2 4 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2 parallel.tp=2
check_case v_sp2_dp2__text_cp2_dp2 4 "${VLM[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.cp=2 parallel.dp=2 vision.parallel.sp=2 vision.parallel.zero=1
echo "vision encoder context parallel (ring attention inside windows and frames)"
echo "the encoder alone on a ring of its own ranks against the whole encoder (tokens, gradients)"
for args in "tiny-qwen2.5-vl 1 2" "tiny-qwen2.5-vl 1 4" "small-qwen2.5-vl 2 2" "tiny-llava 1 2" "tiny-llava 2 2"; do
  set -- $args
  if out=$(timeout 120 "${MPIRUN[@]}" -np $(($2 * $3)) "$SPLIT_CHECK" $args ring 2>&1); then
    pass; echo "  vision ring $args: $(echo "$out" | grep "gradient tensors")"
  else fail "vision ring $args: $(echo "$out" | grep FAIL | head -3)"; fi
done
check_case v_cp2__text_tp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2 vision.parallel.cp=2
check_case v_cp2_zero1__text_cp2 2 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.cp=2 vision.parallel.cp=2 vision.parallel.zero=1
check_case v_cp4__text_tp2_cp2 4 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2 parallel.cp=2 vision.parallel.cp=4
check_case v_cp2_separate__text_tp2 4 "${VLM[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2 vision.parallel.cp=2 vision.parallel.placement=separate

echo "refused layouts"
refused() { # name np expected-message overrides...
  local name=$1 np=$2 want=$3; shift 3
  if timeout 120 "${MPIRUN[@]}" -np "$np" "$LOOM" train "$@" run.name="$name" \
       run.output_dir="$WORK/refused" --quiet >"$WORK/$name.log" 2>&1; then
    fail "$name: started, but the layout should be refused"
  elif grep -q "$want" "$WORK/$name.log"; then pass; echo "  $name: refused: $want"
  else fail "$name: no '$want' in: $(tail -3 "$WORK/$name.log")"; fi
  [ ! -d "$WORK/refused" ] || [ -z "$(ls "$WORK/refused")" ] ||
    fail "$name: a run directory was created for a refused layout"
}
refused r_cp_ulysses_rows 8 "parallel.sp (4) must divide the training.seq_len / parallel.cp = 12 / 2 = 6 tokens" \
  "${GPT2[@]}" training.seq_len=12 training.micro_batch_size=4 parallel.cp=2 parallel.sp=4
refused r_cp_seq_len 2 "training.seq_len (34) must be divisible by 4" \
  "${LLAMA[@]}" model.max_seq=64 training.seq_len=34 training.micro_batch_size=4 parallel.cp=2
refused r_vision_cp_sp 4 "the encoder splits its patches one way" \
  "${VLM[@]}" training.micro_batch_size=4 parallel.tp=2 parallel.dp=2 vision.parallel.cp=2 vision.parallel.sp=2
finish
