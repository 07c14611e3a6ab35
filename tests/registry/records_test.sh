#!/usr/bin/env bash
# Records that agree: one status machine (running, stopped, failed, crashed, finished) written
# the same to summary.json and the registry, steps and losses taken from metrics.jsonl, and a
# failure message that names what happened. Through the real binary under `loom train
# --nproc 2`: a rank killed by signal 9, a rank failing alone with its own error, a resume
# stopped by --stop-after, the resume to the end.
LOOM=${1:?usage: $0 path/to/loom}
WORK=$(mktemp -d /tmp/loom-records.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../loom.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
unset LOOM_REGISTRY
"$LOOM" data synth-text --out "$WORK/c.txt" --bytes 60000 --seed 3 >/dev/null &&
  "$LOOM" data train-tokenizer --vocab-size 300 --out "$WORK/tok.json" "$WORK/c.txt" >/dev/null &&
  "$LOOM" data tokenize --tokenizer "$WORK/tok.json" --out "$WORK/train.bin" "$WORK/c.txt" >/dev/null ||
  { echo "could not make test data"; exit 1; }
RUNS="$WORK/runs"
M=(model.preset=tiny-gpt2 model.vocab_size=300 model.layers=2 model.hidden=64 training.seq_len=32
  training.micro_batch_size=1 parallel.dp=2 training.steps=10 training.log_every=1
  checkpoint.every=4 data.train_shards="$WORK/train.bin" data.tokenizer="$WORK/tok.json"
  run.output_dir="$RUNS" --nproc 2 --quiet)
json() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$1/summary.json" "$2"; }
reg() { "$LOOM" runs --runs-dir "$RUNS" --filter "run_id = '$(basename "$1")'" --format csv --show "$2" | tail -1; }
# metrics.jsonl's last step, its loss and the lowest loss (as the registry prints them)
metric() { python3 - "$1/metrics.jsonl" "$2" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
v = {"steps": rows[-1]["step"], "final_loss": rows[-1]["loss"], "min_loss": min(r["loss"] for r in rows)}[sys.argv[2]]
print(v if isinstance(v, int) else repr(v))
EOF
}
# agree WHAT DIR STATUS: summary.json and the registry say STATUS; steps and losses are
# metrics.jsonl's in both
agree() {
  local d=$2
  check "$1: summary.json and the registry say $3" test "$(json "$d" status)/$(reg "$d" status)" = "$3/$3"
  for k in steps final_loss min_loss; do
    local want; want=$(metric "$d" $k)
    check "$1: registry $k = metrics.jsonl's ($want)" same "$(reg "$d" $k)" "$want"
    check "$1: summary.json $k = metrics.jsonl's ($want)" same "$(json "$d" $k)" "$want"
  done
}
same() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-12 * abs(b))' "$1" "$2" 2>/dev/null; }

# a rank killed by signal 9: the launcher names it; steps and losses from metrics.jsonl
run_cmd env LOOM_FAULT=kill:1:7 timeout 120 "$LOOM" train "${M[@]}" run.name=killed
D=$(ls -d "$RUNS"/killed_*)
expect_rc "rank killed by signal 9" 1
expect_err "the launcher names the rank and the signal" "the job failed: rank 1 was killed by signal 9 (Killed)"
agree "killed rank" "$D" failed
check "killed rank: the registry's error names it" grep -q "rank 1 was killed by signal 9" <<<"$(reg "$D" error)"
check "killed rank: summary.json's error names it" grep -q "rank 1 was killed by signal 9" <<<"$(json "$D" error)"
# a later resume stopped by --stop-after: stopped in both (not finished next to failed)
run_loom train --resume latest --nproc 2 --stop-after 6 run.output_dir="$RUNS" --quiet
expect_rc "--resume latest --nproc 2 --stop-after 6" 0
agree "resume stopped at step 6" "$D" stopped
check "stopped: no error left over" test -z "$(reg "$D" error)" -a -z "$(json "$D" error)"
run_loom train --resume latest --nproc 2 run.output_dir="$RUNS" --quiet
expect_rc "resume to the end" 0
agree "resumed to the end" "$D" finished
check "finished: summary.json's min_loss covers the whole run" same "$(json "$D" min_loss)" "$(metric "$D" min_loss)"

# a rank failing alone: its own error, not "see above" with nothing above
run_cmd env LOOM_FAULT=error:1:3 timeout 120 "$LOOM" train "${M[@]}" run.name=alone
D=$(ls -d "$RUNS"/alone_*)
WANT="rank 1: LOOM_FAULT: an error of this rank alone before step 3 (injected)"
expect_rc "a rank's own error" 1
expect_err "the launcher repeats the rank's error" "the job failed: $WANT"
check "no 'see its message above'" test -z "$(grep -i 'above' <<<"$RUN_ERR")"
check "train.log has the rank's error" grep -q "error: the job ended without a report from loom: $WANT" "$D/train.log"
check "summary.json's error is the rank's" test "$(json "$D" error)" = "$WANT"
check "the registry's error is the rank's" test "$(reg "$D" error)" = "$WANT"
agree "a rank's own error" "$D" failed
finish
