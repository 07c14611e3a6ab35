#!/usr/bin/env bash
# The sweep summary shows each run's own MFU (summary.json's mfu, the registry's column, in
# percent) and, when the runs had validation, its validation losses as CSV columns equal to
# summary.json's and the registry's; without validation those columns are not there.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export LOOM_HW_PROFILE=$SRC/configs/hardware/h100-sxm.yaml # a peak no tiny run reaches
cat > "$WORK/val.yaml" <<'YAML'
name: val
base: base.yaml
overrides: [data.val_fraction=0.1, training.eval_every=3, training.eval_batches=2]
parameters:
  training.lr: {values: [1e-3, 3e-3]}
strategy: grid
YAML
cat > "$WORK/noval.yaml" <<'YAML'
name: noval
base: base.yaml
parameters:
  training.lr: {values: [1e-3]}
strategy: grid
YAML
"$LOOM" sweep run "$WORK/val.yaml" --log-dir "$WORK/logs_val" >"$WORK/val.out" 2>&1 ||
  fail "validation sweep failed: $(tail -3 "$WORK/val.out")"
"$LOOM" sweep run "$WORK/noval.yaml" --log-dir "$WORK/logs_noval" >"$WORK/noval.out" 2>&1 ||
  fail "sweep without validation failed: $(tail -3 "$WORK/noval.out")"
VLOG=$(ls -d "$WORK"/logs_val/sweep_*)
NLOG=$(ls -d "$WORK"/logs_noval/sweep_*)
check_summary_numbers "$VLOG"
check_summary_numbers "$NLOG"
check "validation sweep: CSV has the validation columns" \
  grep -q ',final_valid_loss,final_valid_perplexity,min_valid_loss' <(head -1 "$VLOG/summary.csv")
check "no validation: no validation columns" test -z "$(head -1 "$NLOG/summary.csv" | grep valid)"
for name in $(csv_col "$VLOG/summary.csv" name); do
  run=$(csv_row "$VLOG/summary.csv" name "$name" run_dir)
  # the CSV writes the shortest text that reads back as the same double: exact equality
  check "$name: CSV validation losses = summary.json's = the registry's" python3 - "$run" \
    "$(csv_row "$VLOG/summary.csv" name "$name" final_valid_loss)" \
    "$(csv_row "$VLOG/summary.csv" name "$name" final_valid_perplexity)" \
    "$(csv_row "$VLOG/summary.csv" name "$name" min_valid_loss)" "$WORK/runs/registry.db" <<'PY'
import json, os, sqlite3, sys
run, csv, db = sys.argv[1], [float(x) for x in sys.argv[2:5]], sys.argv[5]
keys = ["final_valid_loss", "final_valid_perplexity", "min_valid_loss"]
s = json.load(open(run + "/summary.json"))
r = sqlite3.connect(db).execute("SELECT " + ",".join(keys) + " FROM runs WHERE run_id=?",
                                (os.path.basename(run),)).fetchone()
sys.exit(not (csv == [s[k] for k in keys] == list(r)))
PY
done
finish
