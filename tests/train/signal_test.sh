#!/usr/bin/env bash
# Signals and preemption, as users send them: Ctrl-C (SIGINT), a scheduler's SIGTERM, Slurm's
# SIGUSR1 before the time limit. Every rank finishes its step, they agree on the step to stop
# at, a checkpoint is saved, summary.json and the registry say "stopped", the exit status is
# 128 + the signal and the printed `loom train --resume ...` continues the run bitwise. A
# second signal stops at once. The same through `loom train --nproc` (the launcher asks the
# ranks and does not relaunch a stopped job, also under --max-restarts), through a raw mpirun
# (SIGUSR1 forwarded; SIGTERM reaching one rank only) and `... | head` (a closed pipe stops the
# printing, not the training).
. "$(dirname "$0")/parallel_common.sh"
make_data || { echo "could not make test data"; exit 1; }
RUNS="$WORK/runs"
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64
  training.seq_len=32 training.micro_batch_size=2 training.log_every=1 checkpoint.every=1000
  data.train_shards="$WORK/train.bin" data.tokenizer="$WORK/tok.json" run.output_dir="$RUNS")
export LOOM_HEARTBEAT_INTERVAL=0
newest() { ls -td "$RUNS"/*/ 2>/dev/null | head -1 | sed 's#/$##'; }
# wait_steps NAME N: until the metrics.jsonl of run NAME (a name, or a run directory) holds N
# steps (at most 60 s)
wait_steps() {
  for _ in $(seq 600); do
    local d; d=$(ls -td "$1" "$RUNS/$1"_*/ 2>/dev/null | head -1)
    [ -n "$d" ] && [ "$(grep -c '"loss"' "$d/metrics.jsonl" 2>/dev/null)" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
json() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$1/summary.json" "$2"; }
reg() { "$LOOM" runs --runs-dir "$RUNS" --filter "run_id = '$(basename "$1")'" --format csv --show "$2" | tail -1; }
last_step() { sed -n 's/^{"step": \([0-9]*\), "loss".*/\1/p' "$1/metrics.jsonl" | tail -1; }
# stopped WHAT DIR SIGNAME: the records of a clean stop agree
stopped() {
  local d=$2 n
  n=$(json "$d" steps)
  check "$1: summary.json stopped" test "$(json "$d" status)" = stopped
  check "$1: stopped_by $3" test "$(json "$d" stopped_by)" = "$3"
  check "$1: registry stopped" test "$(reg "$d" status)" = stopped
  check "$1: registry steps = summary steps = metrics.jsonl's ($n)" \
    test "$(reg "$d" steps)" = "$n" -a "$(last_step "$d")" = "$n"
  check "$1: checkpoint_$n saved at the step it stopped" test -f "$d/checkpoint_$n/COMPLETE"
  check "$1: train.log says how to continue" grep -q "stopped by $3 after step $n .*to continue: loom train --resume $d" "$d/train.log"
}

# --- one process: SIGINT, the resume command, bitwise the uninterrupted run ---------------
"$LOOM" train "${M[@]}" training.steps=60 run.name=ref --quiet >/dev/null 2>&1 || fail "reference run"
REF=$(newest)
# (LOOM_FAULT=slow: 100 ms a step from step 1, so that a loaded machine still stops it in time)
LOOM_FAULT=slow:0:1 "$LOOM" train "${M[@]}" training.steps=60 run.name=int >"$WORK/int.out" 2>"$WORK/int.err" &
pid=$!
wait_steps int 3 || fail "SIGINT run: no steps"
kill -INT $pid; wait $pid; rc=$?
D=$(newest)
check "SIGINT: exit status 130" test $rc = 130
stopped "SIGINT" "$D" SIGINT
check "SIGINT: the command to continue printed" grep -q "to continue: loom train --resume $D$" "$WORK/int.err"
check "SIGINT: stdout holds the run directory" test "$(cat "$WORK/int.out")" = "$D"
echo "  SIGINT: $(grep 'stopped by' "$WORK/int.err")"
cmd=$(sed -n 's/.*to continue: loom //p' "$WORK/int.err")
run_loom $cmd --quiet # the printed command, as a user pastes it
expect_rc "the printed resume command" 0
check "resumed: finished in summary.json and the registry" test "$(json "$D" status)/$(reg "$D" status)" = finished/finished
check "resumed: the losses of the uninterrupted run, bitwise" test "$(losses "$D")" = "$(losses "$REF")"

# --- SIGTERM and SIGUSR1 ------------------------------------------------------------------
for sig in TERM USR1; do
  "$LOOM" train "${M[@]}" training.steps=2000 run.name=$sig --quiet >/dev/null 2>"$WORK/$sig.err" &
  pid=$!
  wait_steps $sig 2 || fail "SIG$sig run: no steps"
  kill -$sig $pid; wait $pid; rc=$?
  want=$([ $sig = TERM ] && echo 143 || echo 138)
  check "SIG$sig: exit status $want" test $rc = "$want"
  stopped "SIG$sig" "$(newest)" SIG$sig
  check "SIG$sig --quiet: still says how to continue" grep -q "to continue: loom train --resume" "$WORK/$sig.err"
done

# --- a second signal stops at once (the first cannot finish: the rank hangs in the step) ---
LOOM_FAULT=hang:0:3 "$LOOM" train "${M[@]}" training.steps=2000 run.name=twice --quiet >/dev/null 2>&1 &
pid=$!
wait_steps twice 2 || fail "two signals: no steps"
sleep 0.5; kill -INT $pid; sleep 0.5
check "one signal while the step cannot end: still running" kill -0 $pid
kill -INT $pid; wait $pid; rc=$?
D=$(newest)
check "a second SIGINT: at once (exit status 130)" test $rc = 130
check "a second SIGINT: no summary, no checkpoint of the step" test ! -e "$D/summary.json" -a ! -e "$D/checkpoint_2"
check "a second SIGINT: the registry sees a crash, with metrics.jsonl's steps" test "$(reg "$D" status)/$(reg "$D" steps)" = crashed/2

# --- loom train --nproc 2: the launcher asks the ranks ----------------------------------------
P=("${M[@]}" parallel.dp=2 training.micro_batch_size=1)
"$LOOM" train "${P[@]}" training.steps=2000 run.name=np --nproc 2 --max-restarts 2 >"$WORK/np.out" 2>"$WORK/np.err" &
pid=$!
wait_steps np 3 || fail "--nproc: no steps"
kill -INT $pid; wait $pid; rc=$?
D=$(newest)
check "--nproc SIGINT: exit status 130" test $rc = 130
stopped "--nproc SIGINT" "$D" SIGINT
check "--nproc: the command to continue has --nproc 2" grep -q "to continue: loom train --resume $D --nproc 2" "$WORK/np.err"
check "--nproc --max-restarts: a stopped job is not relaunched" test "$(grep -c restart "$D/train.log")" = 0
check "--nproc: no rank left running" test -z "$(pgrep -f "run.name=np")"
n=$(json "$D" steps)
run_loom train --resume "$D" --nproc 2 training.steps=2000 --stop-after $((n + 2)) --quiet
expect_rc "--nproc resume with --stop-after" 0
check "--stop-after: summary.json and the registry both stopped" test "$(json "$D" status)/$(reg "$D" status)" = stopped/stopped
check "--stop-after: stopped_by names it" test "$(json "$D" stopped_by)" = "--stop-after $((n + 2))"
# a second signal to the launcher kills the job at once; recorded stopped
LOOM_FAULT=hang:1:$((n + 4)) "$LOOM" train --resume "$D" --nproc 2 --quiet >/dev/null 2>"$WORK/np2.err" &
pid=$!
wait_steps "$D" $((n + 3)) || fail "--nproc resumed: no steps"; sleep 0.5
kill -TERM $pid; sleep 1; kill -TERM $pid; wait $pid; rc=$?
check "--nproc, a second SIGTERM: exit status 143" test $rc = 143
check "--nproc, a second SIGTERM: says so" grep -q "stopped at once by a second SIGTERM" "$WORK/np2.err"
check "--nproc, a second SIGTERM: summary.json and the registry stopped" test "$(json "$D" status)/$(reg "$D" status)" = stopped/stopped
check "--nproc, a second SIGTERM: no rank left running" test -z "$(pgrep -f "resume $D")"

# --- raw mpirun: SIGUSR1 to mpirun (forwarded to every rank), SIGTERM to one rank only ------
"${MPIRUN[@]}" -np 2 "$LOOM" train "${P[@]}" training.steps=2000 run.name=usr --quiet >/dev/null 2>&1 &
pid=$!
wait_steps usr 2 || fail "mpirun: no steps"
kill -USR1 $pid; wait $pid; rc=$?
check "mpirun, SIGUSR1: exit status 138" test $rc = 138
stopped "mpirun SIGUSR1" "$(newest)" SIGUSR1
"${MPIRUN[@]}" -np 2 "$LOOM" train "${P[@]}" training.steps=2000 run.name=one --quiet >/dev/null 2>&1 &
pid=$!
wait_steps one 2 || fail "mpirun: no steps"
rank1=$(for p in $(pgrep -f "run.name=one"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && echo "$p"; done)
kill -TERM $rank1; wait $pid; rc=$?
D=$(newest)
check "SIGTERM to rank 1 only: exit status 143" test $rc = 143
stopped "SIGTERM to rank 1 only: both ranks stop" "$D" SIGTERM
check "SIGTERM to rank 1 only: one checkpoint" test "$(ls -d "$D"/checkpoint_* | wc -l)" = 1

# --- a closed pipe: `loom train ... 2>&1 | head` ---------------------------------------------
"$LOOM" train "${M[@]}" training.steps=40 run.name=pipe 2>&1 | head -2 >/dev/null
rc=${PIPESTATUS[0]}
D=$(newest)
check "| head: training goes on to exit 0" test $rc = 0
check "| head: finished" test "$(json "$D" status)/$(reg "$D" status)" = finished/finished
check "| head: train.log has every step" grep -q "step 40/40" "$D/train.log"
"$LOOM" train "${P[@]}" training.steps=20 run.name=pipe2 --nproc 2 2>&1 | head -2 >/dev/null
rc=${PIPESTATUS[0]}
check "--nproc | head: exit 0, finished" test "$rc/$(json "$(newest)" status)" = 0/finished
finish
