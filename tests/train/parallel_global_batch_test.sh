#!/usr/bin/env bash
# training.global_batch_size drives grad_accum in `loom train`: grad_accum = global /
# (micro_batch_size x dp), printed in the model line and written to the run's config.yaml;
# the run is the same run as one with that grad_accum given explicitly (bitwise, same layout)
# and, over 2 data-parallel ranks, the one-process run of the same global batch (1e-5
# relative per-step loss, the tolerance of equivalence_test.sh). A resume under another dp
# derives grad_accum again from the global batch (its config.yaml holds the old dp's). A global
# batch that does not divide, or a grad_accum that disagrees, is refused with the arithmetic and
# leaves no run.
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64 model.intermediate=128
  training.seq_len=32 training.steps=3 training.warmup_steps=1 data.train_shards="$WORK/train.bin"
  checkpoint.save_final=false)
same_losses() { # A B: bitwise equal per-step losses
  if [ -n "$(losses "$(run_dir "$1")")" ] && [ "$(losses "$(run_dir "$1")")" = "$(losses "$(run_dir "$2")")" ]; then pass
  else fail "$2: losses differ from $1"; fi
}

echo "one process: global 8 = micro-batch 2 x grad_accum 4"
train g1 1 "${M[@]}" training.micro_batch_size=2 training.global_batch_size=8
check "model line shows grad_accum 4 and the global batch" \
  grep -q "B=2 T=32 grad_accum=4, global batch 8 sequences (training.global_batch_size)" "$(run_dir g1)/train.log"
check "resolved config has grad_accum 4" grep -q "grad_accum: 4" "$(run_dir g1)/config.yaml"
train g1_explicit 1 "${M[@]}" training.micro_batch_size=2 training.grad_accum=4
same_losses g1_explicit g1
# an explicit grad_accum that agrees is accepted
train g1_agree 1 "${M[@]}" training.micro_batch_size=2 training.grad_accum=4 training.global_batch_size=8
same_losses g1 g1_agree

echo "two data-parallel ranks: global 8 = micro-batch 2 x dp 2 x grad_accum 2"
train g2 2 "${M[@]}" training.micro_batch_size=2 training.global_batch_size=8 parallel.dp=2
check "model line shows grad_accum 2 over dp 2" grep -q "grad_accum=2, global batch 8 sequences" "$(run_dir g2)/train.log"
cores_line g2 2
train g2_explicit 2 "${M[@]}" training.micro_batch_size=2 training.grad_accum=2 parallel.dp=2
same_losses g2_explicit g2
close_losses g1 g2 1e-5

echo "a resume on another dp: the global batch decides grad_accum again"
# config.yaml of g2 records grad_accum 2 (8 over dp 2): resumed in one process the global batch
# gives grad_accum 4, with no grad_accum on the command line (it was refused before)
train gr 2 "${M[@]}" training.micro_batch_size=2 training.global_batch_size=8 parallel.dp=2 \
  checkpoint.every=2
run_loom train --resume "$(run_dir gr)/checkpoint_2" parallel.dp=1 run.output_dir="$WORK/fork" --quiet
expect_rc "resume of the dp=2 run in one process (parallel.dp=1 only)" 0
F=$(ls -d "$WORK"/fork/*/ | head -1)
check "the fork's model line: grad_accum 4, the same global batch" \
  grep -q "grad_accum=4, global batch 8 sequences (training.global_batch_size)" "${F}train.log"
worst=$(paste <(losses "$(run_dir g1)" | tail -1) <(losses "$F") | awk '
  { r = ($1 - $2) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.2e", w; exit (w > 1e-5 || NR != 1) }')
check "the fork's step 3 = the one-process run's within 1e-5 (worst $worst)" test $? = 0
expect_fail "a grad_accum given beside the global batch must still agree" \
  "training.global_batch_size = 8 gives grad_accum = 8 / (micro_batch_size 2 x dp 1) = 4, but training.grad_accum = 2" \
  "$LOOM" train --resume "$(run_dir gr)/checkpoint_2" parallel.dp=1 training.grad_accum=2 run.output_dir="$WORK/fork2" --quiet

RUNS="$WORK/bad_runs"
refused() { # what np expected-substring overrides...
  local what=$1 np=$2 want=$3; shift 3
  if [ "$np" = 1 ]; then run_loom train "${M[@]}" run.output_dir="$RUNS" "$@" # tests/loom.sh
  else run_cmd timeout 120 "${MPIRUN[@]}" -np "$np" "$LOOM" train "${M[@]}" run.output_dir="$RUNS" "$@"; fi
  if [ $RUN_RC -eq 0 ]; then fail "$what: exit code 0"; run_show
  elif [[ "$RUN_ERR" != *"$want"* ]]; then fail "$what: message lacks '$want': $RUN_ERR"; run_show
  else pass; fi
  check "$what: no run directory" test ! -e "$RUNS"
}
refused "global batch not a multiple (1 rank)" 1 \
  "training.global_batch_size = 10 is not a multiple of training.micro_batch_size x parallel.dp = 4 x 1 = 4 (remainder 2)" \
  training.micro_batch_size=4 training.global_batch_size=10
refused "global batch not a multiple (2 ranks)" 2 \
  "training.global_batch_size = 6 is not a multiple of training.micro_batch_size x parallel.dp = 2 x 2 = 4 (remainder 2)" \
  training.micro_batch_size=2 training.global_batch_size=6 parallel.dp=2
refused "grad_accum disagrees" 1 \
  "training.global_batch_size = 8 gives grad_accum = 8 / (micro_batch_size 2 x dp 1) = 4, but training.grad_accum = 3" \
  training.micro_batch_size=2 training.global_batch_size=8 training.grad_accum=3
refused "negative global batch" 1 "training.global_batch_size = -8 is out of range" \
  training.global_batch_size=-8
finish
