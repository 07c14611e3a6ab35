#!/usr/bin/env bash
# Mixture-of-Experts and Qwen3 models through `loom train` (tests/torch checks the numbers of one
# process against PyTorch; this checks the layouts and the run around them):
#  - MoE (tiny-qwen3-moe, 3 layers with the middle one dense, aux + z-loss, balancing bias):
#    data parallelism equals one process, 20 steps, per-step loss within 1e-5 relative and
#    final weights within 1e-4 (ZeRO 1, 2, 3; capacity dropping on), as every layout must
#    (tests/train/parallel_equivalence_test.sh: only the order of fp32 sums changes, measured
#    ~1e-8 here). One window per micro-batch (micro_batch_size 1) so that one process and two
#    ranks form the same micro-batches: the aux loss and the capacity are per micro-batch;
#  - activation checkpointing gives the same losses bit for bit;
#  - resume of an MoE run with bias balancing continues bitwise (losses, final checkpoint);
#  - metrics.jsonl carries aux_loss, z_loss, moe_load, moe_dropped; train.log the load line;
#  - every layout MoE layers do not run in yet is refused before training, with its key
#    (pipeline parallelism runs: tests/train/parallel_ep_test.sh);
#  - dense Qwen3 (q/k norms) in every layout equals one process (tp, Megatron sp, Ulysses,
#    context and pipeline parallelism, ZeRO-3), 4 steps, 1e-5 / 1e-4 as above;
#  - `loom generate` on the MoE checkpoint: each greedy id equals what a prefill of the whole
#    sequence so far (no cache) chooses.
. "$(dirname "$0")/../train/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }

MOE=(model.preset=tiny-qwen3-moe model.vocab_size=300 model.layers=3 model.moe.mlp_only_layers=1
  model.moe.z_loss_coef=0.001 model.moe.bias_update_rate=0.001 training.seq_len=32
  training.micro_batch_size=1 training.steps=20 training.warmup_steps=2 training.log_every=5
  data.train_shards="$WORK/train.bin" checkpoint.every=0)
FP32=1e-5 W32=1e-4

echo "MoE: data parallelism against one process (4 micro-batches of one sequence a step)"
train m_single 1 "${MOE[@]}" training.grad_accum=4
for z in 1 2 3; do
  train m_dp2_zero$z 2 "${MOE[@]}" training.grad_accum=2 parallel.dp=2 parallel.zero=$z &&
    { close_losses m_single m_dp2_zero$z $FP32; close_weights m_single m_dp2_zero$z $W32; }
done
# capacity dropping by position: which pairs go depends on the selections only, not on how
# fp32 rounding orders two nearly equal weights at the cut (dropping by weight, checked against
# PyTorch in torch_moe_capacity_fp32, can swap such a pair between layouts: measured 5e-6)
CAP=(model.moe.capacity_factor=1.0 model.moe.drop_policy=position)
train m_cap_single 1 "${MOE[@]}" training.grad_accum=4 "${CAP[@]}"
train m_cap_dp2 2 "${MOE[@]}" training.grad_accum=2 parallel.dp=2 parallel.zero=1 "${CAP[@]}" &&
  close_losses m_cap_single m_cap_dp2 $FP32

echo "MoE: activation checkpointing, the records"
train m_recompute 1 "${MOE[@]}" training.grad_accum=4 training.activation_checkpointing=true
check "recompute: the same losses bit for bit" \
  test "$(losses "$(run_dir m_single)")" = "$(losses "$(run_dir m_recompute)")"
M=$(run_dir m_single)/metrics.jsonl
check "metrics.jsonl: aux_loss, z_loss, moe_load of 2 MoE layers, moe_dropped" \
  grep -q '"aux_loss": [0-9.e-]*, "z_loss": [0-9.e-]*, "moe_load": \[[0-9.]*, [0-9.]*\], "moe_dropped": \[0, 0\]}' "$M"
check "metrics.jsonl: one line a step" test "$(grep -c '"moe_load"' "$M")" = 20
check "train.log: the expert load" grep -q 'moe: aux [0-9.]* | z [0-9.]* | load max/mean [0-9.]* [0-9.]*$' "$(run_dir m_single)/train.log"
D=$(run_dir m_cap_single)
check "capacity: dropped pairs reported" grep -q '"moe_dropped": \[[1-9]' "$D/metrics.jsonl"
check "capacity: train.log counts them" grep -q 'dropped [1-9][0-9]* pairs' "$D/train.log"
B0=$("$LOOM" ckpt inspect "$(run_dir m_single)/final_checkpoint" 2>&1 | grep -c 'moe.router.bias')
check "the balancing biases are checkpoint tensors (2 layers): $B0" test "$B0" -ge 2

echo "MoE: resume with bias balancing"
R=(run.output_dir="$WORK/resume" "${MOE[@]}" training.grad_accum=2 training.steps=12 checkpoint.every=6)
"$LOOM" train "${R[@]}" run.name=straight --quiet >/dev/null
"$LOOM" train "${R[@]}" run.name=cut --stop-after 6 --quiet >/dev/null
a=$(ls -d "$WORK"/resume/straight_*) b=$(ls -d "$WORK"/resume/cut_*)
"$LOOM" train --resume "$b/checkpoint_6" --quiet >/dev/null
check "resume: 12 steps" test "$(losses "$b" | wc -l)" = 12
check "resume: losses bit for bit" test "$(losses "$a")" = "$(losses "$b")"
check "resume: aux losses bit for bit" test "$(grep -o '"aux_loss": [^,]*' "$a/metrics.jsonl")" = \
  "$(grep -o '"aux_loss": [^,]*' "$b/metrics.jsonl")"
check "resume: final checkpoint (biases included) byte for byte" \
  cmp -s "$a/final_checkpoint/model.safetensors" "$b/final_checkpoint/model.safetensors"

echo "MoE: layouts not run yet are refused, naming the key"
SHORT=("${MOE[@]}" training.steps=2)
refused 1 parallel.ep "does not divide parallel.dp" "${SHORT[@]}" parallel.ep=2
refused 2 parallel.sp_mode "parallel.sp_mode = megatron with Mixture-of-Experts" "${SHORT[@]}" parallel.tp=2 parallel.sp_mode=megatron
refused 2 parallel.ep "folds expert parallelism on the tensor-parallel ranks" "${SHORT[@]}" parallel.tp=2 parallel.etp=1
refused 2 parallel.etp "other expert tensor splits are for loom sim" "${SHORT[@]}" parallel.tp=2 parallel.etp=4
refused 1 parallel.ep "this model is dense" model.preset=tiny-qwen3 model.vocab_size=300 \
  training.seq_len=32 training.steps=2 data.train_shards="$WORK/train.bin" parallel.ep=2
test -z "$(ls "$WORK/refused" 2>/dev/null)" && pass || fail "a refused run left a run directory"

echo "dense Qwen3 (q/k norms): every layout against one process"
Q3=(model.preset=tiny-qwen3 model.vocab_size=300 model.layers=2 training.seq_len=32
  training.micro_batch_size=4 training.grad_accum=2 training.steps=4 training.warmup_steps=2
  data.train_shards="$WORK/train.bin" checkpoint.every=0)
train q_single 1 "${Q3[@]}"
q_case() { # name overrides...
  local name=$1; shift
  train "$name" 2 "${Q3[@]}" "$@" && { close_losses q_single "$name" $FP32; close_weights q_single "$name" $W32; }
}
q_case q_tp2 parallel.tp=2
q_case q_tp2_megatron_sp parallel.tp=2 parallel.sp_mode=megatron
q_case q_ulysses2 parallel.sp=2
q_case q_cp2 parallel.cp=2
q_case q_pp2 parallel.pp=2 parallel.schedule=1f1b
q_case q_dp2_zero3 parallel.dp=2 parallel.zero=3 training.micro_batch_size=2

echo "generate on the MoE checkpoint: cached greedy ids = a whole-sequence prefill's"
CK=$(run_dir m_single)/final_checkpoint
ids=$("$LOOM" generate "$CK" --prompt-ids 5,17,42,9 --max-new-tokens 6 --ignore-eos --json 2>/dev/null |
  sed -n 's/.*"ids":\[\([0-9,]*\)\].*/\1/p')
n=$(echo "$ids" | tr ',' '\n' | grep -c .)
check "generate: 6 greedy ids ($ids)" test "$n" = 6
rows="" seq="5,17,42,9"
for i in $(seq 1 "$n"); do rows="$rows${rows:+;}$seq"; seq="$seq,$(echo "$ids" | cut -d, -f"$i")"; done
next=$("$LOOM" generate "$CK" --prompt-ids "$rows" --max-new-tokens 1 --ignore-eos --json 2>/dev/null |
  sed -n 's/.*"ids":\[\([0-9]*\)\].*/\1/p' | paste -sd, -)
check "generate: every id is the prefill's next token ($next)" test "$next" = "$ids"
finish
