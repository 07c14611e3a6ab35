#!/usr/bin/env bash
# MFU as one figure: summary.json's mfu (a fraction) equals the registry's mfu column and the
# figure recomputed here from the run's tokens, duration_s (training time), ranks, model FLOPs
# per token and the profile's peak; peak_flops and peak_source name where the peak came from.
# Without a profile, or with a profile whose peak the run beats (MFU would be ~4000%), there
# is no mfu (summary.json: mfu_note says why; registry: NULL) and never a figure above 100%.
# `loom sim` computes the same model FLOPs per token as the trainer for the same config (the
# function is shared), and `loom runs --filter 'mfu>0'` / `--show mfu` read the column.
. "$(dirname "$0")/common.sh"
make_data || { echo "could not make test data"; exit 1; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
LOOM=$(cd "$(dirname "$LOOM")" && pwd)/$(basename "$LOOM") # the no-profile case runs elsewhere
RUNS=$WORK/runs
H100=$SRC/configs/hardware/h100-sxm.yaml
M=(run.output_dir="$RUNS" model.vocab_size=300 model.hidden=64 model.heads=4 model.layers=2
  model.max_seq=64 training.seq_len=32 training.micro_batch_size=4 training.steps=8
  training.log_every=2 data.train_shards="$WORK/train.bin")
train() { # name, extra... -> run directory
  local name=$1; shift
  "$LOOM" train "${M[@]}" run.name="$name" "$@" --quiet >/dev/null 2>"$WORK/$name.err" ||
    { fail "$name: training failed: $(tail -2 "$WORK/$name.err")"; return; }
  ls -d "$RUNS/${name}_"*
}
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d.get(sys.argv[2]); print("" if v is None else repr(v))' "$1" "$2"; }
reg() { # run dir, column -> repr of the registry's value ("" for NULL)
  python3 -c 'import sqlite3,sys,os; r=sqlite3.connect(sys.argv[1]).execute("SELECT \""+sys.argv[3]+"\" FROM runs WHERE run_id=?",(os.path.basename(sys.argv[2]),)).fetchone(); print("" if r is None or r[0] is None else repr(r[0]))' "$RUNS/registry.db" "$1" "$2"
}

# ---- a profile with a reachable peak (the H100's): the figure everywhere ----------------------
for preset in tiny-gpt2 tiny-llama; do
  d=$(LOOM_HW_PROFILE="$H100" train "fast-$preset" model.preset=$preset)
  [ -n "$d" ] || continue
  s=$d/summary.json
  mfu=$(json "$s" mfu)
  check "$preset: summary.json has mfu" test -n "$mfu"
  check "$preset: 0 < mfu <= 1 (a fraction)" python3 -c "import sys; sys.exit(not 0 < $mfu <= 1)"
  check "$preset: peak_flops is the profile's fp32 peak (67 TFLOP/s)" python3 -c "import sys; sys.exit($(json "$s" peak_flops) != 67e12)"
  check "$preset: peak_source names the profile, dtype and backend" python3 - "$s" "$H100" <<'PY'
import json, sys
src = json.load(open(sys.argv[1]))["peak_source"]
sys.exit(not (src["profile"] == sys.argv[2] and src["dtype"] == "fp32" and src["backend"] in ("onednn", "openblas")))
PY
  # recomputed from the recorded quantities: a handful of double operations in another order,
  # so equal to ~1e-15 relative; 1e-12 leaves room and still catches any other definition
  check "$preset: mfu = tokens * flops_per_token / (duration_s * ranks * peak_flops)" python3 - "$s" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = d["tokens"] * d["flops_per_token"] / (d["duration_s"] * d["ranks"] * d["peak_flops"])
print("  mfu %.6g, recomputed %.6g" % (d["mfu"], want))
sys.exit(abs(d["mfu"] - want) > 1e-12 * want)
PY
  check "$preset: tokens = steps x batch tokens (8 x 4 x 32)" test "$(json "$s" tokens)" = 1024
  check "$preset: registry mfu = summary.json's (bitwise)" test "$(reg "$d" mfu)" = "$mfu"
  # loom sim: the same FLOPs per token for the same model and sequence length
  "$LOOM" sim "${M[@]}" model.preset=$preset --hardware h100-sxm --gpus 1 --json "$WORK/sim-$preset.json" \
    >"$WORK/sim-$preset.out" 2>&1 || fail "$preset: loom sim failed: $(tail -2 "$WORK/sim-$preset.out")"
  check "$preset: loom sim's flops_per_token = the trainer's ($(json "$s" flops_per_token))" \
    test "$(json "$WORK/sim-$preset.json" flops_per_token)" = "$(json "$s" flops_per_token)"
  check "$preset: loom sim's MFU within (0, 100] %" python3 -c "import json,sys; m=json.load(open('$WORK/sim-$preset.json'))['mfu']; sys.exit(not 0 < m <= 1)"
done
D=$(ls -d "$RUNS"/fast-tiny-gpt2_*)
check "loom runs --filter 'mfu>0' lists the runs with a figure" \
  test "$("$LOOM" runs --db "$RUNS/registry.db" --filter 'mfu>0' --show run_id | grep -c '^fast-')" = 2
check "loom runs --show mfu --format json: the registry's figure" python3 - "$D" \
  <("$LOOM" runs --db "$RUNS/registry.db" --show run_id,mfu --format json) <<'PY'
import json, os, sys
rows = {r["run_id"]: r["mfu"] for r in json.load(open(sys.argv[2]))}
want = json.load(open(sys.argv[1] + "/summary.json"))["mfu"]
sys.exit(rows.get(os.path.basename(sys.argv[1])) != want)
PY

# ---- a peak any run beats (1 kFLOP/s; one token is ~1.1 MFLOP): absent + note, never 4000% ----
sed 's/peak_tflops: {fp32: 67,/peak_tflops: {fp32: 0.000000001,/' "$H100" >"$WORK/slow.yaml"
check "fixture: slow profile written" grep -q "fp32: 0.000000001," "$WORK/slow.yaml"
d=$(LOOM_HW_PROFILE="$WORK/slow.yaml" train slow model.preset=tiny-gpt2)
if [ -n "$d" ]; then
  check "tiny peak: no mfu in summary.json" test -z "$(json "$d/summary.json" mfu)"
  check "tiny peak: mfu_note says the run exceeds the peak" python3 -c "import json,sys; n=json.load(open('$d/summary.json'))['mfu_note']; sys.exit('exceed the profile' not in n)"
  check "tiny peak: registry mfu NULL" test -z "$(reg "$d" mfu)"
  check "tiny peak: no percentage above 100 anywhere in train.log or summary.json" \
    test -z "$(grep -ohE '[0-9]{3,}(\.[0-9]+)?%' "$d/train.log" "$d/summary.json" | awk -F% '$1 > 100')"
fi
check "no mfu above 1 in the registry" test -z "$(python3 -c "import sqlite3; print(''.join(str(r) for r in sqlite3.connect('$RUNS/registry.db').execute('SELECT mfu FROM runs WHERE mfu > 1')))")"

# ---- loom sim with a profile that has no peak for the dtype: no MFU (not the fp32 one) --------
sed 's/peak_tflops: {fp32: 67, bf16: [0-9.]*/peak_tflops: {fp32: 67, bf16: 0/' "$H100" >"$WORK/nobf16.yaml"
check "fixture: profile without a bf16 peak" grep -q "bf16: 0," "$WORK/nobf16.yaml"
"$LOOM" sim "${M[@]}" --hardware "$WORK/nobf16.yaml" --gpus 1 --dtype bf16 --json "$WORK/nobf16.json" \
  >"$WORK/nobf16.out" 2>&1 || fail "loom sim without a bf16 peak failed: $(tail -2 "$WORK/nobf16.out")"
check "sim, no bf16 peak: MFU not shown, and why" grep -q "MFU *not shown: hardware profile 'h100-sxm' has no bf16 peak" "$WORK/nobf16.out"
check "sim, no bf16 peak: --json mfu null with mfu_note" python3 -c "import json,sys; d=json.load(open('$WORK/nobf16.json')); sys.exit(not (d['mfu'] is None and 'no bf16 peak' in d['mfu_note']))"

# ---- a registry made before these columns existed: opened, they are added (NULL in old rows) --
python3 - "$WORK/old.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""CREATE TABLE runs (run_id TEXT PRIMARY KEY, name TEXT, status TEXT,
  start_time REAL, end_time REAL, run_dir TEXT, steps INTEGER, final_loss REAL);
CREATE TABLE custom_metrics (run_id TEXT NOT NULL, key TEXT NOT NULL, value,
  PRIMARY KEY (run_id, key));
INSERT INTO runs VALUES ('old-run', 'old', 'finished', 1000.0, 1100.5, NULL, 5, 2.5);""")
db.commit()
PY
check "old registry: loom runs reads it with mfu, duration_s and parent_id" python3 - \
  <("$LOOM" runs --db "$WORK/old.db" --show run_id,mfu,duration_s,parent_id --format json) <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(not (len(r) == 1 and r[0]["mfu"] is None and r[0]["parent_id"] is None
              and r[0]["duration_s"] == 100.5))  # no recorded training time: end - start
PY
d=$(LOOM_REGISTRY="$WORK/old.db" LOOM_HW_PROFILE="$H100" train into-old model.preset=tiny-gpt2)
check "old registry: a new run records its mfu there" python3 -c "
import json, sqlite3, sys
m = sqlite3.connect('$WORK/old.db').execute(\"SELECT mfu FROM runs WHERE run_id LIKE 'into-old_%'\").fetchone()[0]
sys.exit(m != json.load(open('$d/summary.json'))['mfu'])"

# ---- no profile: absent + the reason ---------------------------------------------------------
if [ ! -e "$SRC/configs/hardware/this-machine.yaml" ]; then
  d=$(cd "$WORK" && HOME="$WORK" LOOM_HW_PROFILE= train none model.preset=tiny-gpt2)
  if [ -n "$d" ]; then
    check "no profile: no mfu" test -z "$(json "$d/summary.json" mfu)"
    check "no profile: no peak_flops" test -z "$(json "$d/summary.json" peak_flops)"
    check "no profile: mfu_note says to run loom bench" grep -q "no measured peak of this machine (run 'loom bench'" "$d/summary.json"
    check "no profile: registry mfu NULL" test -z "$(reg "$d" mfu)"
  fi
else
  echo "note: a profile of this machine exists in the source tree; the no-profile case is not run"
fi
finish
