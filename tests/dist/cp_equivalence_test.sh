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
. "$(dirname "$0")/common.sh"
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

echo "bf16 with activation checkpointing"
train lb_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true
BASE=lb_single TOL=$BF16 WTOL=2e-2
check_case lb_cp2 2 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true parallel.cp=2

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
refused r_cp_ulysses 4 "with Ulysses sequence parallelism (parallel.sp=2) is not supported" \
  "${LLAMA[@]}" training.micro_batch_size=4 parallel.cp=2 parallel.sp=2
refused r_cp_seq_len 2 "training.seq_len (34) must be divisible by 4" \
  "${LLAMA[@]}" model.max_seq=64 training.seq_len=34 training.micro_batch_size=4 parallel.cp=2
finish
