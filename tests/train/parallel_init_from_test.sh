#!/usr/bin/env bash
# checkpoint.init_from: a run starts from given weights in any parallel layout.
#  - training.steps=0 from init_from writes the loaded weights as its final checkpoint: they
#    must equal the source bit for bit (ckpt compare --rtol 0) in every layout class (one
#    process, tp, Megatron sp, pp, interleaved pp, Ulysses sp, ZeRO-1/2/3, dp2 x tp2 x pp2,
#    per-module vision strategies), from every kind of source (loom checkpoint of one process
#    or in rank pieces, written with ZeRO-3 too; a Hugging Face directory, sharded; bf16 on
#    disk), for GPT-2, Llama (GQA), Qwen2 (GQA + q/k/v bias, untied), Qwen2.5-VL and LLaVA
#    (both the vision encoder and the decoder). A control shows the comparison fails for
#    fresh weights.
#  - a fine-tune of an exported-then-imported model in an 8-rank layout (dp2 x tp2 x pp2,
#    ZeRO-1) equals the one-process fine-tune: per-step losses 1e-5 relative, final weights
#    1e-4 relative norm per tensor — the tolerances of equivalence_test.sh, for the same
#    reason (the layouts only reorder fp32 sums; see there).
#  - resuming a fine-tune continues it bitwise (same layout) and does not reload init_from.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
# other data for the fine-tunes: another corpus, the same tokenizer
"$LOOM" data synth-text --out "$WORK/other.txt" --bytes 60000 --seed 11 >/dev/null &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/ft.bin" "$WORK/other.txt" >/dev/null ||
  { echo "could not make the fine-tune data"; exit 1; }

GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=4 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.warmup_steps=2 checkpoint.every=0)
# same_weights A_CKPT B_CKPT what: bitwise equal parameters (every tensor, both modules)
same_weights() {
  local out
  if out=$("$LOOM" ckpt compare "$1" "$2" --rtol 0 2>&1); then pass
  else fail "$3: weights differ from the source: $(echo "$out" | tail -1)"; fi
}
# zero_from NAME NP SOURCE EXPECTED overrides...: steps=0 run from SOURCE equals EXPECTED
zero_from() {
  local name=$1 np=$2 src=$3 want=$4; shift 4
  train "$name" "$np" "$@" training.steps=0 checkpoint.init_from="$src" &&
    same_weights "$want" "$(run_dir "$name")/final_checkpoint" "$name"
}

echo "GPT-2: base run, Hugging Face export (f32 sharded, bf16), import"
train base 1 "${GPT2[@]}" training.steps=4 training.micro_batch_size=4 data.train_shards="$WORK/train.bin"
BASE="$(run_dir base)/final_checkpoint"
"$LOOM" ckpt export "$BASE" --out "$WORK/hf32" --max-shard-size 40KB >/dev/null &&
  "$LOOM" ckpt export "$BASE" --out "$WORK/hf16" --dtype bf16 >/dev/null &&
  "$LOOM" ckpt import "$WORK/hf32" --out "$WORK/imported" >/dev/null &&
  "$LOOM" ckpt import "$WORK/hf16" --out "$WORK/imported16" >/dev/null || fail "export/import"
check "the f32 export is sharded" test -f "$WORK/hf32/model.safetensors.index.json"
G0=("${GPT2[@]}" training.micro_batch_size=4 data.train_shards="$WORK/train.bin")

# control: fresh weights are not the base run's (the bitwise comparison can fail)
train fresh 1 "${G0[@]}" training.steps=0
if "$LOOM" ckpt compare "$BASE" "$(run_dir fresh)/final_checkpoint" --rtol 0 >/dev/null 2>&1; then
  fail "control: fresh initial weights compare equal to the trained ones"; else pass; fi
check "steps=0 summary has no losses or step times" bash -c "! grep -qE 'loss|step_time|tokens_per_s' '$(run_dir fresh)/summary.json'"
check "steps=0 summary is valid JSON with steps 0" /usr/bin/python3 -c \
  "import json, sys; s = json.load(open(sys.argv[1])); assert s['steps'] == 0 and s['timed_steps'] == 0, s" \
  "$(run_dir fresh)/summary.json"

zero_from z_single 1 "$WORK/imported" "$BASE" "${G0[@]}"
z=$(run_dir z_single)
check "train.log says which weights" grep -q "initialised from $WORK/imported (loom checkpoint" "$z/train.log"
check "summary.json records init_from" grep -q "\"init_from\": \"$WORK/imported\"" "$z/summary.json"
check "config.yaml records init_from" grep -q "init_from: $WORK/imported" "$z/config.yaml"
check "steps=0 run has a final checkpoint, no metrics" test ! -s "$z/metrics.jsonl"
check "the registry records init_from" bash -c "'$LOOM' runs --runs-dir '$WORK/runs' \
  --filter \"checkpoint.init_from = '$WORK/imported' AND steps = 0\" | grep -q '^z_single_'"
zero_from z_tp2 2 "$WORK/imported" "$BASE" "${G0[@]}" parallel.tp=2
zero_from z_tp2_megatron 2 "$WORK/imported" "$BASE" "${G0[@]}" parallel.tp=2 parallel.sp_mode=megatron
zero_from z_pp2 2 "$WORK/imported" "$BASE" "${G0[@]}" parallel.pp=2
zero_from z_ulysses2 2 "$WORK/imported" "$BASE" "${G0[@]}" parallel.sp=2
zero_from z_dp2_zero3 2 "$WORK/imported" "$BASE" "${G0[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.zero=3
zero_from z_dp2_zero2 2 "$WORK/imported" "$BASE" "${G0[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.zero=2
zero_from z_pp2_interleaved 2 "$WORK/imported" "$BASE" "${G0[@]}" parallel.pp=2 parallel.vpp=2 parallel.schedule=interleaved
zero_from z_dp2_tp2_pp2 8 "$WORK/imported" "$BASE" "${G0[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.tp=2 parallel.pp=2 parallel.zero=1
echo "  from the Hugging Face directory itself (sharded f32; bf16)"
zero_from z_hf_single 1 "$WORK/hf32" "$BASE" "${G0[@]}"
check "train.log names the Hugging Face source" grep -q "initialised from $WORK/hf32 (Hugging Face directory" "$(run_dir z_hf_single)/train.log"
zero_from z_hf_dp2_tp2_zero3 4 "$WORK/hf32" "$BASE" "${G0[@]}" training.micro_batch_size=2 parallel.dp=2 parallel.tp=2 parallel.zero=3
# bf16 on disk: exactly the bf16 values (as `ckpt import` widens them), within bf16 rounding
# (2^-9 relative per element, so <= 1.95e-3 relative norm) of the fp32 source
zero_from z_hf16_tp2_pp2 4 "$WORK/hf16" "$WORK/imported16" "${G0[@]}" parallel.tp=2 parallel.pp=2
"$LOOM" ckpt compare "$BASE" "$(run_dir z_hf16_tp2_pp2)/final_checkpoint" --rtol 1.95e-3 >/dev/null &&
  pass || fail "bf16 weights are not within bf16 rounding of the source"
check "no temporary import left in the output directory" test -z "$(find "$WORK/runs" -maxdepth 1 -name '.init_from*')"

echo "  from a loom checkpoint in rank pieces (dp2 x tp2 ZeRO-1; dp2 ZeRO-3)"
train pieces 4 "${GPT2[@]}" training.steps=3 training.micro_batch_size=2 data.train_shards="$WORK/train.bin" parallel.dp=2 parallel.tp=2 parallel.zero=1
P="$(run_dir pieces)/final_checkpoint"
check "source in rank pieces" test -f "$P/model-r00001.safetensors" -a ! -f "$P/model.safetensors"
zero_from z_pieces_single 1 "$P" "$P" "${G0[@]}"
check "train.log names the rank pieces" grep -q "loom checkpoint in rank pieces" "$(run_dir z_pieces_single)/train.log"
zero_from z_pieces_pp2_tp2 4 "$P" "$P" "${G0[@]}" parallel.pp=2 parallel.tp=2
train pieces3 2 "${GPT2[@]}" training.steps=3 training.micro_batch_size=2 data.train_shards="$WORK/train.bin" parallel.dp=2 parallel.zero=3
zero_from z_zero3_src_tp2 2 "$(run_dir pieces3)/final_checkpoint" "$(run_dir pieces3)/final_checkpoint" "${G0[@]}" parallel.tp=2

echo "fine-tune of the imported model on other data: 8 ranks (dp2 x tp2 x pp2, ZeRO-1) = one process"
FT=("${GPT2[@]}" training.steps=4 data.train_shards="$WORK/ft.bin" checkpoint.init_from="$WORK/imported")
train ft_single 1 "${FT[@]}" training.micro_batch_size=4 training.grad_accum=2
train ft_8 8 "${FT[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.tp=2 parallel.pp=2 parallel.zero=1 &&
  { close_losses ft_single ft_8 1e-5; close_weights ft_single ft_8 1e-4; }
train ft_zero3_ulysses 4 "${FT[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.sp=2 parallel.zero=3 &&
  { close_losses ft_single ft_zero3_ulysses 1e-5; close_weights ft_single ft_zero3_ulysses 1e-4; }
# control: the same fine-tune from fresh weights starts elsewhere (init_from is what matters)
train ft_fresh 1 "${GPT2[@]}" training.steps=1 data.train_shards="$WORK/ft.bin" training.micro_batch_size=4 training.grad_accum=2
a=$(losses "$(run_dir ft_single)" | head -1) b=$(losses "$(run_dir ft_fresh)" | head -1)
if awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / b; exit !(d > 1e-3 || d < -1e-3) }'; then pass
else fail "first fine-tune loss $a is the fresh run's $b: the weights were not loaded"; fi
echo "  first loss from the imported weights $a, from fresh weights $b"
# bf16 compute: the bf16 copy of the loaded weights is what the forward uses. Its first loss
# is the fp32 fine-tune's within the bf16 tolerance of equivalence_test.sh (2e-3; measured
# ~5e-6), far from the fresh weights' (2e-2 apart), and tp2 x pp2 matches one process (2e-3).
train ft_bf16 1 "${FT[@]}" training.micro_batch_size=4 training.grad_accum=2 training.dtype=bf16
c=$(losses "$(run_dir ft_bf16)" | head -1)
if awk -v a="$a" -v c="$c" 'BEGIN { d = (a - c) / a; exit !(d < 2e-3 && d > -2e-3) }'; then pass
else fail "bf16 fine-tune starts at $c, the fp32 one at $a: the bf16 weights are not the loaded ones"; fi
train ft_bf16_tp2_pp2 4 "${FT[@]}" training.micro_batch_size=4 training.grad_accum=2 training.dtype=bf16 parallel.tp=2 parallel.pp=2 &&
  close_losses ft_bf16 ft_bf16_tp2_pp2 2e-3

echo "resuming a fine-tune: bitwise in the same layout, init_from not loaded again"
train ft_stop 2 "${FT[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2 checkpoint.every=2 --stop-after 2
train ft_straight 2 "${FT[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2
rs=$(run_dir ft_stop)
if timeout 300 "${MPIRUN[@]}" -np 2 "$LOOM" train --resume "$rs/checkpoint_2" --quiet >"$WORK/ft_resume.log" 2>&1; then
  if [ "$(losses "$rs")" = "$(losses "$(run_dir ft_straight)")" ]; then pass; else fail "resumed fine-tune is not bitwise"; fi
  check "resume says init_from is not reloaded" grep -q "not loaded again" "$rs/train.log"
else fail "resuming the fine-tune: $(tail -2 "$WORK/ft_resume.log")"; fi

echo "Qwen2 family (GQA, q/k/v bias, untied), from its Hugging Face export, tp2 x pp2 = one process"
QWEN=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=4
  model.hidden=64 model.heads=4 model.kv_heads=2 model.intermediate=96 model.qkv_bias=true
  model.tied_embeddings=false training.seq_len=32 training.warmup_steps=1 checkpoint.every=0)
train q_base 1 "${QWEN[@]}" training.steps=2 training.micro_batch_size=4 data.train_shards="$WORK/train.bin"
"$LOOM" ckpt export "$(run_dir q_base)/final_checkpoint" --out "$WORK/qhf" >/dev/null || fail "qwen2 export"
check "exported as Qwen2" grep -q Qwen2ForCausalLM "$WORK/qhf/config.json"
zero_from q_zero_tp2_pp2 4 "$WORK/qhf" "$(run_dir q_base)/final_checkpoint" "${QWEN[@]}" training.micro_batch_size=4 data.train_shards="$WORK/train.bin" parallel.tp=2 parallel.pp=2
QFT=("${QWEN[@]}" training.steps=3 training.micro_batch_size=2 training.grad_accum=2 data.train_shards="$WORK/ft.bin" checkpoint.init_from="$WORK/qhf")
train q_ft_single 1 "${QFT[@]}" parallel.dp=1
train q_ft_tp2_pp2 4 "${QFT[@]}" parallel.tp=2 parallel.pp=2 &&
  { close_losses q_ft_single q_ft_tp2_pp2 1e-5; close_weights q_ft_single q_ft_tp2_pp2 1e-4; }

echo "Llama (GQA, no biases, tied), from its Hugging Face export: Ulysses sp2 x dp2 with ZeRO-3"
LLAMA=(model.preset=tiny-llama model.vocab_size=300 model.layers=2 model.hidden=64 model.heads=4
  model.kv_heads=2 model.intermediate=96 training.seq_len=32 training.micro_batch_size=2
  data.train_shards="$WORK/train.bin" checkpoint.every=0)
train ll_base 1 "${LLAMA[@]}" training.steps=2
"$LOOM" ckpt export "$(run_dir ll_base)/final_checkpoint" --out "$WORK/llhf" >/dev/null || fail "llama export"
check "exported as Llama" grep -q LlamaForCausalLM "$WORK/llhf/config.json"
zero_from ll_zero_sp2_dp2_zero3 4 "$WORK/llhf" "$(run_dir ll_base)/final_checkpoint" "${LLAMA[@]}" parallel.sp=2 parallel.dp=2 parallel.zero=3

echo "vision-language: both the vision encoder and the decoder start from the checkpoint"
{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 40 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 4,1,0; } >"$WORK/synth.log" 2>&1 ||
  { echo "could not make the VQA data"; cat "$WORK/synth.log"; exit 1; }
VLM=(model.preset=tiny-qwen2.5-vl model.vocab_size=384 training.seq_len=48 training.warmup_steps=1
  training.lr=2e-3 data.format=vqa data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json"
  data.image_min_pixels=12544 data.image_max_pixels=12544 checkpoint.every=0 training.micro_batch_size=4)
train v_base 1 "${VLM[@]}" training.steps=2
VB="$(run_dir v_base)/final_checkpoint"
zero_from v_zero_single 1 "$VB" "$VB" "${VLM[@]}"
zero_from v_zero_vsp2_zero1__tp2 2 "$VB" "$VB" "${VLM[@]}" parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1
zero_from v_zero_separate_zero3__pp2 4 "$VB" "$VB" "${VLM[@]}" parallel.pp=2 vision.parallel.placement=separate vision.parallel.sp=2 vision.parallel.zero=3
# a source in rank pieces of both modules: vision ZeRO-3 over dp2 + text dp2 ZeRO-1
train v_src_pieces 2 "${VLM[@]}" training.steps=1 training.micro_batch_size=2 parallel.dp=2 parallel.zero=1 vision.parallel.zero=3
VP="$(run_dir v_src_pieces)/final_checkpoint"
check "VLM source in rank pieces of both modules" test -f "$VP/vision-model-r00001.safetensors"
zero_from v_zero_from_pieces_single 1 "$VP" "$VP" "${VLM[@]}"
# the one-file form (what `ckpt import` writes): both modules' tensors in one model.safetensors
/usr/bin/python3 - "$VB" "$WORK/vlm_one" "$(dirname "$0")/../ckpt" <<'PY' || fail "writing the one-file VLM checkpoint"
import os, shutil, sys
sys.path.insert(0, sys.argv[3])
import hf_st
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
t = {}
for f in ("model-r00000.safetensors", "vision-model-r00000.safetensors"):
    t.update(hf_st.read_file(os.path.join(src, f))[0])
assert any(k.startswith("vision.") for k in t) and "embed.weight" in t, sorted(t)[:5]
hf_st.write_dir(out, t)
shutil.copy(os.path.join(src, "config.yaml"), out)
PY
check "one-file VLM checkpoint" test -f "$WORK/vlm_one/model.safetensors"
zero_from v_zero_onefile_vtp2__tp2 2 "$WORK/vlm_one" "$VB" "${VLM[@]}" parallel.tp=2 vision.parallel.tp=2
VFT=("${VLM[@]}" training.steps=2 training.grad_accum=2 checkpoint.init_from="$VB")
train v_ft_single 1 "${VFT[@]}"
train v_ft_vsp2__tp2 2 "${VFT[@]}" parallel.tp=2 vision.parallel.sp=2 vision.parallel.zero=1 &&
  { close_losses v_ft_single v_ft_vsp2__tp2 1e-5; close_weights v_ft_single v_ft_vsp2__tp2 1e-4; }
# a vision-language checkpoint into a text-only model: another family, named by a vision tensor
err=$("$LOOM" train "${G0[@]}" run.output_dir="$WORK/vl_into_text" checkpoint.init_from="$VB" 2>&1 >/dev/null)
if [ $? -ne 0 ] && [[ "$err" == *"holds qwen2.5-vl weights but this run's model is gpt2 (model.preset = tiny-gpt2, model.arch = \"\"): tensor 'pos_embed.weight': the model expects [256, 64], the weights have no such tensor; set model.preset (or model.arch) to the weights' model (their config has model.preset = tiny-qwen2.5-vl"* ]]; then pass
else fail "VLM weights into a text model: $err"; fi
check "VLM weights into a text model: no run directory" test ! -e "$WORK/vl_into_text"
LLAVA=("${VLM[@]}" model.preset=tiny-llava training.seq_len=96)
train l_base 1 "${LLAVA[@]}" training.steps=1
LB="$(run_dir l_base)/final_checkpoint"
zero_from l_zero_tp2 2 "$LB" "$LB" "${LLAVA[@]}" parallel.tp=2
zero_from l_zero_dp2_vzero3 2 "$LB" "$LB" "${LLAVA[@]}" parallel.dp=2 training.micro_batch_size=2 vision.parallel.zero=3
finish
