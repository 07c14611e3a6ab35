#!/usr/bin/env bash
# Run lineage (docs/EXPERIMENTS.md "Resume and lineage"). A resume with the run's config
# (bookkeeping keys like training.log_every or checkpoint.keep_last aside) continues the run:
# same id, metrics contiguous and bitwise equal to an uninterrupted run's, duration_s the
# training time and not the idle gap before the resume. Any trajectory change (training.steps,
# the layout, a +user key) forks a new run that records run.parent / run.parent_checkpoint in
# config.yaml, summary.json and the registry, starts its metrics.jsonl after the fork step,
# and leaves every file of the parent byte-for-byte as it was. A run killed mid-way is
# crashed in the registry with metrics.jsonl's training time. A forked run killed before
# its first checkpoint of its own is restarted by the supervisor from its parent checkpoint
# as the same run; `--resume latest` and `--resume <its dir>` continue it too. A checkpoint of
# a finished run resumed with its config is a fork: the finished run is never re-trained.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
RUNS=$WORK/runs
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.hidden=64 model.heads=4 model.layers=2
  model.max_seq=64 training.seq_len=32 training.micro_batch_size=4 training.steps=12
  training.warmup_steps=3 training.log_every=1 checkpoint.every=6
  data.train_shards="$WORK/train.bin" --quiet)
"$LOOM" train "${M[@]}" run.output_dir="$WORK/ref" >/dev/null || { echo "reference run failed"; exit 1; }
REF=$(ls -d "$WORK"/ref/*/)
state() { (cd "$1" && find . | sort && find . -type f | sort | xargs sha256sum); }
dirs() { ls -d "$RUNS"/*/ | sed 's:/$::'; }
steps_of() { sed -n 's/^{"step": \([0-9]*\), "loss".*/\1/p' "$1/metrics.jsonl" | tr '\n' ' '; }
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d.get(sys.argv[2]); print("" if v is None else v)' "$1/summary.json" "$2"; }
reg() { # run id, column -> the registry's value ("" for NULL)
  python3 -c 'import sqlite3,sys; r=sqlite3.connect(sys.argv[1]).execute("SELECT \""+sys.argv[3]+"\" FROM runs WHERE run_id=?",(sys.argv[2],)).fetchone(); print("" if r is None or r[0] is None else repr(r[0]))' "$RUNS/registry.db" "$1" "$2"
}

# ---- same config: the run continues, across an idle gap ------------------------------------
"$LOOM" train "${M[@]}" run.output_dir="$RUNS" run.name=p --stop-after 6 >/dev/null ||
  fail "first session failed"
P=$(dirs)
PID=$(basename "$P")
GAP=3
sleep $GAP
# bookkeeping keys differ (log cadence, checkpoint retention): still the same run
"$LOOM" train --resume "$P/checkpoint_6" training.log_every=2 checkpoint.keep_last=2 --quiet \
  >/dev/null 2>"$WORK/cont.err" || fail "same-config resume failed: $(cat "$WORK/cont.err")"
check "same config: no new run directory" test "$(dirs)" = "$P"
check "same config: train.log says it continues" grep -q "continuing run $PID (same config; changed keys that cannot change the trajectory: training.log_every 1 -> 2, checkpoint.keep_last 0 -> 2)" "$P/train.log"
check "same config: metrics contiguous 1..12" test "$(steps_of "$P")" = "$(seq -s ' ' 1 12) "
if [ "$(losses "$REF")" = "$(losses "$P")" ]; then pass; else
  fail "same config: losses differ from the uninterrupted run"; diff <(losses "$REF") <(losses "$P") >&2; fi
check "same config: no run.parent" test -z "$(json "$P" parent_run)"
dur=$(json "$P" duration_s)
steptime=$(sed -n 's/.*"step_time": \([^,]*\),.*/\1/p' "$P/metrics.jsonl" | awk '{ s += $1 } END { printf "%.6f", s }')
echo "  duration_s $dur s, sum of step times $steptime s, idle gap $GAP s"
# duration_s is the step loops' time: at least the steps' own time (step_time has 6 decimals:
# 12 roundings of at most 5e-7 each), far below the idle gap the wall clock saw
check "duration_s ($dur) < the idle gap ($GAP s)" awk -v d="$dur" -v g=$GAP 'BEGIN { exit !(d > 0 && d < g) }'
check "duration_s >= sum of step times ($steptime)" awk -v d="$dur" -v s="$steptime" 'BEGIN { exit !(d + 6e-6 >= s) }'
check "registry duration_s = summary.json's" python3 -c "import sys; sys.exit(abs(float('$(reg "$PID" duration_s)') - $dur) > 1e-12 * $dur)"
check "registry: finished, 12 steps" test "$(reg "$PID" status)/$(reg "$PID" steps)" = "'finished'/12"

# ---- a run killed mid-way: the registry marks it crashed with the training time it recorded
# (through sh, which does not announce the SIGKILL as bash does)
LOOM_FAULT=kill:0:5 sh -c '"$@" >/dev/null 2>&1; :' sh "$LOOM" train "${M[@]}" run.output_dir="$RUNS" run.name=killed
K=$(ls -d "$RUNS"/killed_*)
check "killed run: 4 steps recorded" test "$(steps_of "$K")" = "1 2 3 4 "
check "killed run: registry crashed, duration_s = metrics.jsonl's last time" python3 - "$K" \
  <("$LOOM" runs --db "$RUNS/registry.db" --show run_id,status,duration_s --format json) <<'PY'
import json, os, sys
run = sys.argv[1]
row = [r for r in json.load(open(sys.argv[2])) if r["run_id"] == os.path.basename(run)][0]
last = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"loss"' in l][-1]["time"]
print("  killed run: %s, duration_s %s (metrics.jsonl: %s)" % (row["status"], row["duration_s"], last))
sys.exit(not (row["status"] == "crashed" and row["duration_s"] == last))
PY
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$K")" --files >/dev/null

# ---- changed training.steps: a new run; the parent is untouched -----------------------------
BEFORE=$(state "$P")
"$LOOM" train --resume "$P/checkpoint_6" training.steps=16 --stop-after 12 --quiet \
  >/dev/null 2>"$WORK/fork.err" || fail "fork failed: $(cat "$WORK/fork.err")"
C=$(dirs | grep -v "^$P$")
CID=$(basename "$C")
check "steps changed: one new run directory" test "$(echo "$C" | wc -w)" = 1
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else
  fail "steps changed: the parent's files changed"; diff <(echo "$BEFORE") <(state "$P") | head -5 >&2; fi
check "fork: train.log names parent, checkpoint and the changed key" grep -q "a new run forked from run $PID at $P/checkpoint_6: the config differs from the run's in training.steps 12 -> 16" "$C/train.log"
check "fork: config.yaml records run.parent" grep -qx "  parent: $PID" "$C/config.yaml"
check "fork: config.yaml records run.parent_checkpoint" grep -qx "  parent_checkpoint: $P/checkpoint_6" "$C/config.yaml"
check "fork: metrics.jsonl starts after the fork step (7..12 so far)" test "$(steps_of "$C")" = "$(seq -s ' ' 7 12) "
check "fork: the parent is still finished at 12 steps" test "$(reg "$PID" status)/$(reg "$PID" steps)" = "'finished'/12"
check "fork: registry parent_id" test "$(reg "$CID" parent_id)" = "'$PID'"
check "fork: registry parent_checkpoint" test "$(reg "$CID" parent_checkpoint)" = "'$P/checkpoint_6'"
check "fork: loom runs --show parent lists the parent" \
  grep -q "$CID *$PID" <("$LOOM" runs --db "$RUNS/registry.db" --show run_id,parent 2>&1)
check "default table (wide terminal): parent_id shown, run.parent* not repeated" python3 - \
  <(COLUMNS=400 "$LOOM" runs --db "$RUNS/registry.db") <<'PY'
import sys
head = open(sys.argv[1]).readline().split()
sys.exit(not ("parent_id" in head and "run.parent" not in head and "parent_checkpoint" not in head))
PY
check "fork: loom runs show prints parent_id" \
  grep -q "parent_id *$PID" <("$LOOM" runs --db "$RUNS/registry.db" show "$CID" 2>&1)
# --resume latest (the fork, newest) with its own config: continues the fork, no grandchild
"$LOOM" train --resume latest run.output_dir="$RUNS" --quiet >/dev/null 2>"$WORK/latest.err" ||
  fail "resume latest of the fork failed: $(cat "$WORK/latest.err")"
check "fork + --resume latest: still two runs" test "$(dirs | wc -l)" = 2
check "fork + --resume latest: continued the fork" grep -q "continuing run $CID" "$C/train.log"
check "fork: metrics 7..16" test "$(steps_of "$C")" = "$(seq -s ' ' 7 16) "
check "fork: summary.json parent_run" test "$(json "$C" parent_run)" = "$PID"
check "fork: summary.json parent_checkpoint" test "$(json "$C" parent_checkpoint)" = "$P/checkpoint_6"
check "fork: steps count from step 0 (16)" test "$(json "$C" steps)" = 16
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else fail "the parent changed while its fork ran"; fi
# the curves overlap on the fork's steps 7..12 only: runs diff compares those six
"$LOOM" runs diff "$PID" "$CID" --db "$RUNS/registry.db" >"$WORK/diff.out" 2>&1
check "runs diff parent fork: exit 1 (training.steps changes the schedule)" test $? = 1
check "runs diff parent fork: the 6 shared steps 7..12" grep -q "of 6 steps beyond tolerance, the first at step" "$WORK/diff.out"

# ---- a +user key is part of the config: a fork -----------------------------------------------
BEFORE=$(state "$P")
"$LOOM" train --resume "$P/checkpoint_6" +exp.idea=longer --stop-after 7 --quiet >/dev/null 2>"$WORK/user.err" ||
  fail "fork by a user key failed: $(cat "$WORK/user.err")"
U=$(dirs | grep -v "^$P$" | grep -v "^$C$")
check "+user key added: a new run" test "$(echo "$U" | wc -w)" = 1
check "+user key: train.log names it" grep -q "differs from the run's in +exp.idea (added)" "$U/train.log"
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else fail "+user key fork: the parent changed"; fi
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$U")" --files >/dev/null

# ---- a fork that fails (lr 1e30: the loss becomes NaN) is a failed run of its own ----------
BEFORE=$(state "$P")
"$LOOM" train --resume "$P/checkpoint_6" training.lr=1e30 --quiet >/dev/null 2>"$WORK/nan.err"
check "failing fork: exit 1" test $? = 1
N=$(dirs | grep -v "^$P$" | grep -v "^$C$")
check "failing fork: its own run directory" test "$(echo "$N" | wc -w)" = 1
check "failing fork: summary.json failed, naming its parent" python3 -c "import json,sys; d=json.load(open('$N/summary.json')); sys.exit(not (d['status'] == 'failed' and d['parent_run'] == '$PID' and 'NaN' in d['error']))"
check "failing fork: registry failed with parent_id" test "$(reg "$(basename "$N")" status)/$(reg "$(basename "$N")" parent_id)" = "'failed'/'$PID'"
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else fail "failing fork: the parent changed"; fi
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$N")" --files >/dev/null

# ---- another layout (2 ranks, same global batch): a fork ---------------------------------------
BEFORE=$(state "$P")
"$LOOM" train --resume "$P/checkpoint_6" --nproc 2 parallel.dp=2 training.micro_batch_size=2 \
  --quiet >/dev/null 2>"$WORK/dp.err" || fail "fork to dp=2 failed: $(cat "$WORK/dp.err")"
D=$(dirs | grep -v "^$P$" | grep -v "^$C$")
check "layout changed: one new run" test "$(echo "$D" | wc -w)" = 1
check "layout changed: train.log names the keys" grep -q "differs from the run's in training.micro_batch_size 4 -> 2, parallel.dp 1 -> 2" "$D/train.log"
check "layout changed: parent recorded" test "$(json "$D" parent_run)" = "$PID"
check "layout changed: the fork's metrics 7..12" test "$(steps_of "$D")" = "$(seq -s ' ' 7 12) "
check "layout changed: summary.json says 2 ranks" test "$(json "$D" ranks)" = 2
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else fail "layout fork: the parent changed"; fi
check "registry: the parent's two forks" test "$("$LOOM" runs --db "$RUNS/registry.db" \
  --filter "parent_id = '$PID'" --show run_id 2>&1 | grep -c "^p_")" = 2

# ---- a forked run killed before its own first checkpoint: the supervisor restarts it from ----
# ---- the parent's checkpoint as the same run, with the losses of the undisturbed fork -------
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$D")" --files >/dev/null
rm -f "$WORK/once"
LOOM_FAULT_ONCE="$WORK/once" LOOM_FAULT=kill:0:9 "$LOOM" train --resume "$P/checkpoint_6" \
  training.steps=16 --max-restarts 1 --quiet >/dev/null 2>"$WORK/sup.err" ||
  fail "supervised fork failed: $(cat "$WORK/sup.err")"
S=$(dirs | grep -v "^$P$" | grep -v "^$C$")
check "supervised fork: killed once" test -e "$WORK/once"
check "supervised fork: one new run, no grandchild" test "$(echo "$S" | wc -w)" = 1
check "supervised fork: train.log says the restart starts at the fork's checkpoint" grep -q "restart 1 of 1 after: .*; resuming from $P/checkpoint_6 (the checkpoint the run was forked from)" "$S/train.log"
check "supervised fork: the restart continued the fork" grep -q "continuing run $(basename "$S")" "$S/train.log"
check "supervised fork: resumed from the parent's checkpoint" grep -q "resumed from $P/checkpoint_6 at step 6" "$S/train.log"
check "supervised fork: metrics 7..16" test "$(steps_of "$S")" = "$(seq -s ' ' 7 16) "
if [ "$(losses "$C")" = "$(losses "$S")" ]; then pass; else
  fail "supervised fork: losses differ from the undisturbed fork's"; diff <(losses "$C") <(losses "$S") >&2; fi
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else fail "supervised fork: the parent changed"; fi

# ---- a fork stopped before its own first checkpoint: --resume <its dir> continues it from ------
# ---- the parent's checkpoint as the same run (the user's way, not only the supervisor's) ----
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$S")" --files >/dev/null
"$LOOM" train --resume "$P/checkpoint_6" training.steps=16 --stop-after 8 --quiet >/dev/null 2>&1 ||
  fail "fork stopped at 8 failed"
S=$(dirs | grep -v "^$P$" | grep -v "^$C$")
check "fork stopped at 8: no checkpoint of its own" test -z "$(ls -d "$S"/checkpoint_* 2>/dev/null)"
run_loom train --resume "$S" --quiet
expect_rc "--resume <the fork's dir> before its first checkpoint" 0
check "--resume <fork dir>: the same run continued" grep -q "continuing run $(basename "$S")" "$S/train.log"
check "--resume <fork dir>: from the parent's checkpoint" grep -q "resumed from $P/checkpoint_6 at step 6" "$S/train.log"
check "--resume <fork dir>: metrics 7..16, no grandchild" test "$(steps_of "$S")/$(dirs | wc -l)" = "$(seq -s ' ' 7 16) /3"
check "--resume <fork dir>: the undisturbed fork's losses" test "$(losses "$S")" = "$(losses "$C")"
check "--resume <fork dir>: finished in summary.json and the registry" \
  test "$(json "$S" status)/$(reg "$(basename "$S")" status)" = "finished/'finished'"
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$S")" --files >/dev/null

# ---- a checkpoint of a finished run with its own config: a fork, never re-trained in place ---
BEFORE=$(state "$P")
run_loom train --resume "$P/checkpoint_6" --quiet
expect_rc "--resume <finished run>/checkpoint_6" 0
G=$(dirs | grep -v "^$P$" | grep -v "^$C$")
check "finished run's checkpoint: a new run" test "$(echo "$G" | wc -w)" = 1
check "finished run's checkpoint: train.log says why" grep -q "a new run forked from run $PID at $P/checkpoint_6: run $PID is finished (same config; its files are left as they are)" "$G/train.log"
if [ "$(state "$P")" = "$BEFORE" ]; then pass; else fail "finished run's checkpoint: the parent changed"; fi
check "finished run's checkpoint: the parent's losses from step 7, bitwise" test "$(losses "$G")" = "$(losses "$P" | tail -n +7)"
check "finished run's checkpoint: the parent still finished" test "$(reg "$PID" status)" = "'finished'"
expect_fail "--resume <finished run>: nothing left to train" "nothing left to train" \
  "$LOOM" train --resume "$P" --quiet
"$LOOM" runs --db "$RUNS/registry.db" delete "$(basename "$G")" --files >/dev/null

# ---- without --resume, a forked run's config.yaml trains a fresh run, nobody's child --------
"$LOOM" train "$C/config.yaml" run.name=fresh training.steps=2 --quiet >/dev/null 2>"$WORK/fresh.err" ||
  fail "training a fork's config.yaml failed: $(cat "$WORK/fresh.err")"
F=$(ls -d "$RUNS"/fresh_*)
check "fresh run from a fork's config: no parent" test -z "$(json "$F" parent_run)"
check "fresh run: train.log says run.parent was cleared" grep -q "run.parent ($PID) of the config cleared" "$F/train.log"
check "fresh run: config.yaml without parent" grep -qx '  parent: ""' "$F/config.yaml"
finish
