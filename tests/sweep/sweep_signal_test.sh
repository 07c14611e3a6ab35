#!/usr/bin/env bash
# A sweep stopped with a signal, then continued, as a user does it:
#   1. `loom sweep run FILE --parallel 2` (a 2-rank point among them, under mpirun) gets SIGINT
#      while two points train: the runner passes it on (LOOM_STOP_FILE), the running points
#      finish their step, save a checkpoint and end "stopped" (summary.json and the registry),
#      no process is left, the runner exits 130, state.tsv says STOPPED for them and PENDING
#      for the points not started, and the command to continue is printed;
#   2. `loom sweep run FILE --parallel 2 --resume` continues in the same directory: the stopped
#      runs resume from their checkpoint under their own run id (no fork), the others start;
#      every point SUCCESS with all its steps, a resumed run's losses equal, bit for bit, those
#      of the same point trained without interruption;
#   3. SIGTERM: exit 143; a plain rerun (no --resume) continues the unfinished execution too,
#      and --new starts a new one;
#   4. a second signal kills the running points at once (still exit 130, recorded STOPPED);
#      the next run starts them again or resumes them from a checkpoint they had.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
cd "$WORK"
export OMPI_MCA_rmaps_base_oversubscribe=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
cat > sweep.yaml <<YAML
name: sig
base: $WORK/base.yaml
overrides: [training.steps=40, checkpoint.every=10, training.log_every=1]
parameters:
  parallel.dp: {values: [2, 1]}
  training.lr: {values: [1e-3, 3e-3]}
strategy: grid
YAML
state() { grep -v '^#' "$1/state.tsv" | cut -f1,2 | sort | tr '\t\n' ': '; } # name:STATUS ...
status_of() { grep -v '^#' "$1/state.tsv" | awk -F'\t' -v n="$2" '$1 == n { print $2 }'; }
rows() { "$LOOM" runs --runs-dir "$WORK/runs" --sweep sig --format csv "$@" | tail -n +2; }
# the steps a run logged (metrics.jsonl lines with a loss)
steps_of() { awk '/"loss": / { n++ } END { print n + 0 }' "$1/metrics.jsonl" 2>/dev/null || echo 0; }
# start `loom sweep run ARGS` in the background (slow steps: 100 ms each), wait until two points
# have logged 3 steps each; its pid in $RUNNER
start_slow() {
  LOOM_FAULT=slow:0:1 "$LOOM" sweep run sweep.yaml --parallel 2 "$@" > run.out 2>&1 &
  RUNNER=$!
  for _ in $(seq 300); do
    local n=0 d
    for d in runs/*/; do [ "$(steps_of "$d")" -ge 3 ] && n=$((n + 1)); done
    [ "$n" -ge 2 ] && return 0
    sleep 0.1
  done
  fail "two points did not start training within 30 s"; cat run.out
}

# ---- 1. SIGINT while two points train ---------------------------------------------------------
start_slow
kill -INT "$RUNNER"
wait "$RUNNER"; rc=$?
check "SIGINT: the runner exits 130 (got $rc)" test "$rc" = 130
cat run.out | sed 's/^/    /' | head -20
LOG=$(sed -n 's/.*logs in \(.*\)$/\1/p' run.out)
check "the log directory is known ($LOG)" test -f "$LOG/state.tsv"
check "the command to continue is printed" grep -q "^to continue: loom sweep run sweep.yaml --parallel 2 --resume$" run.out
st=$(state "$LOG")
check "state.tsv: 2 STOPPED, 2 PENDING ($st)" \
  test "$(grep -o STOPPED <<< "$st" | wc -l) $(grep -o PENDING <<< "$st" | wc -l)" = "2 2"
check "the 2-rank point was running and is STOPPED" test "$(status_of "$LOG" tiny-gpt2_dp2_lr1e-3)" = STOPPED
check "no loom train of this sweep is left running" bash -c "! ps -eo args | grep -v grep | grep -q 'loom train $LOG'"
check "the registry: 2 runs, both stopped ($(rows --show name,status | tr '\n' ' '))" \
  test "$(rows --show status | sort | uniq -c | tr -s ' ')" = " 2 stopped"
for d in runs/*/; do
  n=$(steps_of "$d")
  check "$(basename "$d"): summary.json says stopped" grep -q '"status": "stopped"' "$d/summary.json"
  check "$(basename "$d"): a checkpoint at the step it stopped ($n)" test -f "$d/checkpoint_$n/COMPLETE"
  check "$(basename "$d"): stopped before the end ($n of 40 steps)" test "$n" -lt 40
done
check "summary.txt lists the stopped points" test "$(grep -c ' | STOPPED ' "$LOG/summary.txt")" = 2
ids_before=$(rows --show run_id | sort)

# ---- 2. --resume: the same directory, the stopped runs continue -------------------------------
run_loom sweep run sweep.yaml --parallel 2 --resume
expect_rc "sweep run --resume" 0
expect_out "continues the execution in its directory" "continuing the execution in $LOG: 4 of 4 points to run (2 resume"
st=$(state "$LOG")
check "state.tsv: every point SUCCESS ($st)" test "$(grep -o SUCCESS <<< "$st" | wc -l)" = 4
check "the registry: 4 runs of the sweep, all finished, 40 steps each" \
  test "$(rows --show status,steps | sort | uniq -c | tr -s ' ')" = " 4 finished,40"
check "the stopped runs continued under their own ids (no fork)" \
  test "$(rows --show run_id | sort | grep -cxF -f <(echo "$ids_before"))" = 2 -a -z "$(rows --show parent_id | tr -d '\n')"
check "no second log directory" test "$(ls logs | wc -l)" = 1
check "the stopped point's log holds both executions" test "$(grep -c '^# loom sweep sig' "$LOG/tiny-gpt2_dp2_lr1e-3.log")" = 2
# a resumed run = the same point trained without interruption, bit for bit (under mpirun -np 2)
rid=$(rows --filter "name = 'tiny-gpt2_dp2_lr1e-3'" --show run_dir)
check "tiny-gpt2_dp2_lr1e-3 was one of the stopped runs" \
  grep -qx "$(rows --filter "name = 'tiny-gpt2_dp2_lr1e-3'" --show run_id)" <<< "$ids_before"
mpirun -np 2 "$LOOM" train "$LOG/configs/tiny-gpt2_dp2_lr1e-3.yaml" run.output_dir="$WORK/plain" \
  --quiet > /dev/null 2>&1
plain=$(ls -d "$WORK"/plain/*/ | head -1)
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }
check "the resumed run = the same point uninterrupted, 40 losses bitwise" \
  test "$(losses "$rid")" = "$(losses "$plain")" -a "$(losses "$rid" | wc -l)" = 40

# ---- 3. SIGTERM; a plain rerun continues; --new ----------------------------------------------
rm -rf runs logs plain
start_slow
kill -TERM "$RUNNER"
wait "$RUNNER"; rc=$?
check "SIGTERM: the runner exits 143 (got $rc)" test "$rc" = 143
LOG=$(sed -n 's/.*logs in \(.*\)$/\1/p' run.out)
check "SIGTERM: 2 STOPPED" test "$(state "$LOG" | grep -o STOPPED | wc -l)" = 2
run_loom sweep run sweep.yaml --parallel 2 --new --dry-run
expect_out "--new: a new execution" "logs in"
run_loom sweep run sweep.yaml --parallel 2
expect_rc "a plain rerun" 0
expect_out "a plain rerun continues the unfinished execution" "continuing the execution in $LOG"
check "... to the end" test "$(state "$LOG" | grep -o SUCCESS | wc -l)" = 4
run_loom sweep run sweep.yaml --resume
expect_rc "--resume when nothing is left unfinished" 2
expect_err "... says so" "was left unfinished"

# ---- 4. a second signal kills the running points at once -------------------------------------
rm -rf runs logs
start_slow
kill -INT "$RUNNER"; sleep 0.05; kill -INT "$RUNNER"
wait "$RUNNER"; rc=$?
check "two signals: exit 130 (got $rc)" test "$rc" = 130
LOG=$(sed -n 's/.*logs in \(.*\)$/\1/p' run.out)
check "two signals: the running points STOPPED ($(state "$LOG"))" test "$(state "$LOG" | grep -o STOPPED | wc -l)" = 2
gone() { # no process of this sweep's points within 10 s
  for _ in $(seq 100); do ps -eo args | grep -v grep | grep -q "loom train $LOG" || return 0; sleep 0.1; done
  return 1
}
check "no loom train of this sweep is left running" gone
run_loom sweep run sweep.yaml --parallel 2 --resume
expect_rc "killed points start again or resume" 0
check "... every point SUCCESS" test "$(state "$LOG" | grep -o SUCCESS | wc -l)" = 4
check "... 40 steps each" test "$(rows --show status,steps --filter "status = 'finished'" | sort | uniq -c | tr -s ' ')" = " 4 finished,40"
finish
