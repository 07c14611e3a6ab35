#!/usr/bin/env bash
# Every parallel strategy, and combinations of them, computes the same training run as one
# process: same per-step losses and same final weights, from the same initial weights
# (drawn per global tensor row, identical in every layout) and the same data (the loader deals
# windows to data-parallel ranks so that dp ranks x micro-batch together see what one process
# sees in one step).
#
# Validation (data.val_fraction, every 2 steps and at the end) runs the forward-only schedule in
# every layout — pipelines pass activations, ZeRO-3 gathers parameters — and its losses at each
# evaluation equal one process's within the per-step loss tolerance (same sums reordered).
#
# Tolerances (fp32): per-step loss 1e-5 relative, final weights 1e-4 relative norm per tensor.
# The strategies change only the order of floating-point sums (tensor-parallel partial sums,
# data-parallel and ZeRO reductions, vocab-parallel softmax statistics): fp32 rounding of such
# reorderings is ~1e-7 relative per reduction (measured here: losses <= 1e-8, weights <= 1e-6).
# AdamW divides each gradient element by its own running RMS, so rounding-level gradient
# differences of near-zero elements become update differences of up to lr per step; the
# weight tolerance allows for that over 4 steps while a real bug (a missing reduction, a
# wrong slice) moves losses by > 1e-3 and weights by > 1e-2.
# bf16: both sides round matmul inputs to bf16, so an fp32-level difference can flip a
# rounding (2^-8 relative) and propagate: 2e-3 on losses (measured <= 5e-5).
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }

GPT2=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=4 model.hidden=64
  model.intermediate=128 training.seq_len=32 training.steps=4 training.warmup_steps=2
  data.train_shards="$WORK/train.bin" checkpoint.every=0 data.val_fraction=0.1
  training.eval_every=2 training.eval_batches=2)
LLAMA=(model.preset=tiny-llama model.vocab_size=301 model.vocab_pad_multiple=1 model.layers=3
  model.hidden=64 model.heads=4 model.kv_heads=2 model.intermediate=96 training.seq_len=32
  training.steps=4 training.warmup_steps=2 data.train_shards="$WORK/train.bin"
  data.val_fraction=0.1 training.eval_every=2 training.eval_batches=2)
FP32=1e-5 W32=1e-4 BF16=2e-3

echo "GPT-2, 4 layers, 2 micro-batches of 4 sequences per step"
train g_single 1 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2
check_case() { # name np overrides...
  local name=$1 np=$2; shift 2
  train "$name" "$np" "$@" && { close_losses "$BASE" "$name" "$TOL"; close_weights "$BASE" "$name" "$WTOL"
    close_val_losses "$BASE" "$name" "$TOL"; }
}
BASE=g_single TOL=$FP32 WTOL=$W32
check_case g_dp2 2 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2
check_case g_dp2_zero1 2 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=1
check_case g_dp2_zero2 2 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=2
check_case g_dp4_zero1 4 "${GPT2[@]}" training.micro_batch_size=1 training.grad_accum=2 parallel.dp=4 parallel.zero=1
check_case g_dp4_zero2 4 "${GPT2[@]}" training.micro_batch_size=1 training.grad_accum=2 parallel.dp=4 parallel.zero=2
check_case g_dp2_zero3 2 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.zero=3
check_case g_dp4_zero3 4 "${GPT2[@]}" training.micro_batch_size=1 training.grad_accum=2 parallel.dp=4 parallel.zero=3
check_case g_dp2_pp2_zero3 4 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.pp=2 parallel.zero=3
check_case g_tp2 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2
check_case g_tp4 4 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=4
check_case g_tp2_megatron_sp 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.tp=2 parallel.sp_mode=megatron
check_case g_ulysses2 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.sp=2
for s in 1f1b gpipe; do
  check_case g_pp2_$s 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=2 parallel.schedule=$s
  check_case g_pp4_$s 4 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=4 parallel.schedule=$s
done
# a user-written schedule (zero-bubble style, backward split into input and weight halves)
check_case g_pp2_custom_schedule 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=2 \
  parallel.schedule_file="$(cd "$(dirname "$0")/../sched/fixtures" && pwd)/custom_zb.txt"
check_case g_pp2_interleaved_vpp2 2 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=2 parallel.vpp=2 parallel.schedule=interleaved
check_case g_dp2_tp2 4 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.tp=2
check_case g_pp2_tp2 4 "${GPT2[@]}" training.micro_batch_size=4 training.grad_accum=2 parallel.pp=2 parallel.tp=2
check_case g_dp2_pp2_tp2 8 "${GPT2[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2 parallel.pp=2 parallel.tp=2 parallel.zero=1

echo "Llama GQA (4 heads, 2 kv heads), 3 layers, vocab 301 unpadded, 3 micro-batches per step"
train l_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3
BASE=l_single
check_case l_tp2_kv2 2 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.tp=2
check_case l_tp2_megatron_sp 2 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.tp=2 parallel.sp_mode=megatron
check_case l_pp2_3layers_3mb 2 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.pp=2
check_case l_pp3_gpipe 3 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 parallel.pp=3 parallel.schedule=gpipe
check_case l_ulysses2_dp2_zero1 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.sp=2 parallel.dp=2 parallel.zero=1
check_case l_dp2_tp2_zero2 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.dp=2 parallel.tp=2 parallel.zero=2
check_case l_dp2_tp2_megatron_zero3 4 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 parallel.dp=2 parallel.tp=2 parallel.sp_mode=megatron parallel.zero=3

echo "bf16 with activation checkpointing"
train lb_single 1 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true
BASE=lb_single TOL=$BF16 WTOL=2e-2
check_case lb_dp2 2 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true parallel.dp=2
check_case lb_dp2_zero3 2 "${LLAMA[@]}" training.micro_batch_size=2 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true parallel.dp=2 parallel.zero=3
check_case lb_tp2_pp2 4 "${LLAMA[@]}" training.micro_batch_size=4 training.grad_accum=3 training.dtype=bf16 training.activation_checkpointing=true parallel.tp=2 parallel.pp=2
finish
