#!/usr/bin/env bash
# Bad layouts and failing ranks give a clear error and a non-zero exit, never a hang: layout
# mismatches are reported on rank 0 before any work starts (with the numbers); an invalid
# schedule file is rejected with the rank, instruction and reason; a rank that dies takes the
# job down; a rank that stops answering makes the others abort after parallel.timeout_s.
# One report per failure: a layout error on 4 ranks is one line (under mpirun, next to Open
# MPI's own notice; under `loom train --nproc`, the only line); a rank killed under --nproc
# leaves its error in train.log, summary.json (status failed) and the registry (failed).
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
RUNS="$WORK/runs"
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  training.seq_len=32 training.micro_batch_size=2 training.steps=4
  data.train_shards="$WORK/train.bin" run.output_dir="$RUNS" --quiet)

expect_fail() { # what, expected-substring, np, args...
  local what=$1 want=$2 np=$3; shift 3
  local out rc start=$SECONDS
  if [ "$np" = 1 ]; then run_cmd timeout 120 "$LOOM" train "$@" # tests/loom.sh
  else run_cmd timeout 120 "${MPIRUN[@]}" -np "$np" "$LOOM" train "$@"; fi
  rc=$RUN_RC out=$RUN_OUT$'\n'$RUN_ERR # stdout and stderr together
  if [ $rc -eq 0 ]; then fail "$what: exit code 0"; return; fi
  if [ $rc -eq 124 ]; then fail "$what: hung (killed after 120 s)"; return; fi
  if [[ "$out" != *"$want"* ]]; then fail "$what: output lacks '$want': $(echo "$out" | head -5)"; return; fi
  pass
  echo "  $what: exit $rc after $((SECONDS - start)) s: $(echo "$out" | grep -m1 -F "$want" | cut -c1-150)"
}
no_runs() { check "$1: no run directory" test -z "$(ls -d "$RUNS"/*/ 2>/dev/null)"; }

expect_fail "ranks != product" "but mpirun started 3 ranks" 3 "${M[@]}" parallel.dp=2
expect_fail "one process, dp=2" "mpirun -np 2" 1 "${M[@]}" parallel.dp=2
expect_fail "tp does not divide heads" "parallel.tp (3) must divide model.heads (4)" 3 "${M[@]}" parallel.tp=3
expect_fail "pp larger than layers" "but the model has only 2 layers" 4 "${M[@]}" parallel.pp=4
expect_fail "megatron mode on the sp axis" "Megatron sequence parallelism runs over the tp ranks" 2 "${M[@]}" parallel.sp=2 parallel.sp_mode=megatron
expect_fail "bad stage split" "adds up to 3 layers" 2 "${M[@]}" parallel.pp=2 'parallel.stage_layers="1,2"'
expect_fail "deadlocking schedule file" "deadlock" 2 "${M[@]}" parallel.pp=2 training.grad_accum=1 \
  parallel.schedule_file="$(cd "$(dirname "$0")/../sched/fixtures" && pwd)/bad_deadlock.txt"
no_runs "layout errors"
out=$(timeout 120 "${MPIRUN[@]}" -np 4 "$LOOM" train "${M[@]}" parallel.tp=3 2>&1)
check "layout error on 4 ranks: one loom line under mpirun" test "$(echo "$out" | grep -c 'loom')" = 1
check "layout error: not doubled" test "$(echo "$out" | grep -c 'loom: loom')" = 0
out=$(timeout 120 "$LOOM" train "${M[@]}" parallel.tp=3 --nproc 4 2>&1); rc=$?
check "layout error on 4 ranks under --nproc: exit 1" test $rc = 1
check "layout error under --nproc: exactly one line" test "$(echo "$out" | wc -l)" = 1
echo "  4 ranks, bad layout, --nproc: $out"
no_runs "layout errors"
unset LOOM_REGISTRY
out=$(LOOM_FAULT=kill:1:3 timeout 120 "$LOOM" train "${M[@]}" parallel.dp=2 training.micro_batch_size=1 --nproc 2 2>&1); rc=$?
run=$(ls -d "$RUNS"/*/ | head -1)
check "killed rank under --nproc: exit 1" test $rc = 1
check "killed rank: named on the terminal" grep -q "rank 1 was killed by signal 9" <<<"$out"
check "killed rank: error in train.log" grep -q "error: the job ended without a report from loom: rank 1 was killed by signal 9" "$run/train.log"
check "killed rank: summary.json status failed" grep -q '"status": "failed"' "$run/summary.json"
check "killed rank: registry row failed" test "$("$LOOM" runs --runs-dir "$RUNS" --format csv --show status 2>/dev/null | tail -1)" = failed
echo "  killed rank under --nproc: $(echo "$out" | grep -v '^loom: LOOM_FAULT' | head -2 | tr '\n' ' ')"
rm -rf "$RUNS"
# an error every rank meets after the run started (NaN loss): one line, in train.log once,
# summary.json and the registry as failed with the error; loom reported it: no restart
out=$(timeout 120 "$LOOM" train "${M[@]}" parallel.dp=2 training.micro_batch_size=1 training.lr=1e30 \
  training.grad_clip=0 --nproc 2 --max-restarts 2 2>&1); rc=$?
run=$(ls -d "$RUNS"/*/ | head -1)
check "NaN on 2 ranks: exit 1" test $rc = 1
check "NaN: exactly one line on the terminal" test "$(echo "$out" | wc -l)" = 1
check "NaN: one error line in train.log" test "$(grep -c 'error: loss became NaN at step' "$run/train.log")" = 1
check "NaN: summary.json failed with the error" grep -q '"error": "loss became NaN at step' "$run/summary.json"
check "NaN: registry row failed" test "$("$LOOM" runs --runs-dir "$RUNS" --format csv --show status 2>/dev/null | tail -1)" = failed
check "NaN: not restarted" test "$(grep -c 'restart' "$run/train.log")" = 0
echo "  NaN on 2 ranks under --nproc: $out"
rm -rf "$RUNS"
# --max-restarts: a collective timeout (a hung rank) is restarted; a rank dying every time
# is restarted exactly K times, then the launcher gives up
out=$(LOOM_FAULT_ONCE="$WORK/once" LOOM_FAULT=hang:1:2 timeout 120 "$LOOM" train "${M[@]}" parallel.dp=2 \
  training.micro_batch_size=1 parallel.timeout_s=3 --nproc 2 --max-restarts 1 2>&1); rc=$?
run=$(ls -d "$RUNS"/*/ | head -1)
check "hung rank, --max-restarts 1: completes" test $rc = 0
check "hung rank: the restart is in train.log" grep -q "restart 1 of 1 after: " "$run/train.log"
check "hung rank: finished summary" grep -q '"status": "finished"' "$run/summary.json"
rm -rf "$RUNS"
out=$(LOOM_FAULT=exit:0:3 timeout 120 "$LOOM" train "${M[@]}" parallel.dp=2 training.micro_batch_size=1 \
  --nproc 2 --max-restarts 2 2>&1); rc=$?
run=$(ls -d "$RUNS"/*/ | head -1)
check "always dying, --max-restarts 2: exit 1" test $rc = 1
check "always dying: exactly 2 restarts logged" test "$(grep -c "restart [0-9] of 2 after" "$run/train.log")" = 2
check "always dying: the launcher gives up" grep -q "giving up after 2 restarts" <<<"$out"
check "always dying: registry counts the restarts" test "$("$LOOM" runs --runs-dir "$RUNS" --format csv --show restarts 2>/dev/null | tail -1)" = 2
rm -rf "$RUNS"
LOOM_FAULT=exit:1:2 expect_fail "a rank dies at step 2" "rank 1 exit before step 2" 2 "${M[@]}" parallel.dp=2 training.micro_batch_size=1
LOOM_FAULT=hang:1:2 expect_fail "a rank hangs at step 2" "no progress for 3 s" 2 "${M[@]}" parallel.dp=2 training.micro_batch_size=1 parallel.timeout_s=3
finish
