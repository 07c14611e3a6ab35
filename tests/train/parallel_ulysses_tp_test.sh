#!/usr/bin/env bash
# Ulysses x tensor parallelism (parallel.sp x parallel.tp) computes the same training run as one
# process: tp splits the heads first (column-parallel q/k/v), then the Ulysses all-to-all over
# the sp ranks trades sequence shards for shards of the tp rank's heads. Same per-step losses,
# validation losses and final weights as the single-process run, for GPT-2, a GQA Llama and a
# GQA Qwen2 (biases, tied embeddings), combined with dp + ZeRO-1 and with pp (8 ranks), in bf16,
# and for a vision-language model whose encoder and decoder both run sp2 x tp2. Layouts whose
# heads do not split are refused before any work, naming the keys.
#
# Tolerances, as in equivalence_test.sh and for the same reasons: the split only reorders fp32
# sums (tensor-parallel partial sums of the row-parallel projections, vocabulary-parallel
# softmax statistics, data-parallel reductions): ~1e-7 relative per reduction, so per-step and
# validation losses 1e-5 relative, final weights 1e-4 relative norm per tensor (AdamW turns
# rounding-level gradient differences of near-zero elements into update differences of up to
# lr). bf16: an fp32-level difference can flip a bf16 rounding of a matmul input (2^-8
# relative) and propagate: 2e-3 on losses, 2e-2 on weights. A wrong head slice, a missing
# all-to-all or reduction moves the losses by > 1e-3.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }

COMMON=(training.seq_len=32 training.steps=4 training.warmup_steps=2
  data.train_shards="$WORK/train.bin" checkpoint.every=0 data.val_fraction=0.1
  training.eval_every=2 training.eval_batches=2)
# 4 heads: 2 per tp rank, 1 per (tp, sp) rank
GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=3 model.hidden=64
  model.intermediate=128 "${COMMON[@]}")
# GQA 8 heads / 4 kv heads: per tp rank 4 / 2, per (tp, sp) rank 2 / 1 (groups of 2 kept)
LLAMA=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=3
  model.hidden=64 model.heads=8 model.kv_heads=4 model.intermediate=96 "${COMMON[@]}")
QWEN2=(model.preset=tiny-qwen2 model.vocab_size=300 model.layers=2 model.hidden=64
  model.heads=8 model.kv_heads=4 model.intermediate=96 "${COMMON[@]}")
FP32=1e-5 W32=1e-4 BF16=2e-3 WB16=2e-2

check_case() { # name np overrides...
  local name=$1 np=$2; shift 2
  train "$name" "$np" "$@" && { close_losses "$BASE" "$name" "$TOL"; close_weights "$BASE" "$name" "$WTOL"
    close_val_losses "$BASE" "$name" "$TOL"; }
}

echo "GPT-2, 3 layers, 2 micro-batches of 4 sequences per step"
train g_single 1 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2
BASE=g_single TOL=$FP32 WTOL=$W32
check_case g_sp2_tp2 4 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.sp=2 parallel.tp=2
check_case g_sp2_tp2_dp2_zero1 8 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 \
  parallel.sp=2 parallel.tp=2 parallel.dp=2 parallel.zero=1

echo "Llama GQA (8 heads, 4 kv heads), 3 micro-batches per step"
train l_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3
BASE=l_single
check_case l_sp2_tp2 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.sp=2 parallel.tp=2
check_case l_sp2_tp2_pp2 8 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 \
  parallel.sp=2 parallel.tp=2 parallel.pp=2

echo "Qwen2 GQA (QKV biases, tied embeddings), ZeRO-3 over the dp x sp replicas"
train q_single 1 "${QWEN2[@]}" training.micro_batch_size=4 training.grad_accum=2
BASE=q_single
check_case q_sp2_tp2_zero3 4 "${QWEN2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.sp=2 parallel.tp=2 \
  parallel.zero=3

echo "bf16 with activation checkpointing"
train lb_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true
BASE=lb_single TOL=$BF16 WTOL=$WB16
check_case lb_sp2_tp2 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 \
  training.activation_checkpointing=true parallel.sp=2 parallel.tp=2

echo "vision-language: encoder sp2 x tp2 (4 vision heads: 1 per rank) under a text decoder sp2 x tp2"
{ "$LOOM" data synth-vqa --out "$WORK/vqa" --samples 104 --shard-size 8 &&
  "$LOOM" data prepare "$WORK/vqa" --split 12,1,0; } >"$WORK/synth.log" 2>&1 ||
  { echo "could not make the VQA data"; cat "$WORK/synth.log"; exit 1; }
# small-qwen2.5-vl: text 4 heads (kv raised to 4 so that they split), vision 4 heads
VLM=(model.preset=small-qwen2.5-vl model.vocab_size=384 model.kv_heads=4 training.seq_len=48
  training.steps=4 training.warmup_steps=1 training.lr=2e-3 data.format=vqa
  data.vqa_path="$WORK/vqa" data.tokenizer="$WORK/vqa/tokenizer.json"
  data.image_min_pixels=12544 data.image_max_pixels=12544 checkpoint.every=0
  training.eval_every=2 training.micro_batch_size=4 training.grad_accum=2)
train v_single 1 "${VLM[@]}"
BASE=v_single TOL=$FP32 WTOL=$W32
check_case v_sp2_tp2__text_sp2_tp2 4 "${VLM[@]}" parallel.sp=2 parallel.tp=2 \
  vision.parallel.sp=2 vision.parallel.tp=2

echo "layouts whose heads do not split over tp x sp are refused before any work, naming the keys"
expect_refused() { # name np message overrides...
  local name=$1 np=$2 msg=$3; shift 3
  local log="$WORK/$name.log"
  if timeout 120 "${MPIRUN[@]}" -np "$np" "$LOOM" train "$@" run.name="$name" \
      run.output_dir="$WORK/bad" --quiet >"$log" 2>&1; then
    fail "$name: training started"
  elif grep -q "$msg" "$log" && [ ! -e "$WORK/bad" ]; then pass
  else fail "$name: expected '$msg' and no run directory: $(tail -2 "$log")"; fi
}
# tiny-llama's 2 kv heads: 1 per tp rank, which cannot be split over sp = 2
expect_refused kv_split 4 "model.kv_heads/tp = 2/2 = 1" model.preset=tiny-llama \
  model.vocab_size=301 "${COMMON[@]}" parallel.sp=2 parallel.tp=2
expect_refused heads_split 4 "model.heads/tp = 2/2 = 1" "${GPT2[@]}" parallel.sp=2 parallel.tp=2 \
  model.heads=2 model.kv_heads=2
finish
