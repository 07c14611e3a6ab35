#!/usr/bin/env bash
# Sweeps end to end through the loom executable: a grid sweep (generate: configs, names,
# manifest, run_sweep.sh; run: its single-rank points, the multi-rank ones skipped — they run
# in sweep_multirank_test.sh) and a random sweep with a deliberately failing point (lr 1e30:
# the loss becomes NaN) run 2 at a time: runs registered with the right columns and statuses,
# the failure reported while the others finish, summary numbers equal to the runs' own
# metrics; then `loom runs` (filter, sort, columns, formats, show, compare, set-metric,
# export, plot), saved gradients with `loom ckpt grad-norms`, and the Slurm launcher.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
RUNS=$WORK/runs

# ---- grid: generate -------------------------------------------------------------------------
cat > "$WORK/grid.yaml" <<'YAML'
name: grid
base: base.yaml
parameters:
  parallel.dp: {values: [1, 2]}
  training.dtype: {values: [fp32, bf16]}
strategy: grid
YAML
"$LOOM" sweep generate "$WORK/grid.yaml" --output-dir "$WORK/gen" > "$WORK/gen.out"
check "generate exits 0" test $? = 0
GRID=(tiny-gpt2_dp1_fp32 tiny-gpt2_dp1_bf16 tiny-gpt2_dp2_fp32 tiny-gpt2_dp2_bf16)
for i in 0 1 2 3; do
  n=${GRID[$i]} dp=$((i / 2 + 1)) dt=$([ $((i % 2)) = 0 ] && echo fp32 || echo bf16)
  check "grid config $n written" test -f "$WORK/gen/$n.yaml"
  check "$n: parallel.dp = $dp" grep -q "^  dp: $dp$" "$WORK/gen/$n.yaml"
  check "$n: training.dtype = $dt" grep -q "^  dtype: $dt$" "$WORK/gen/$n.yaml"
  check "$n: run.name is the point's name" grep -q "^  name: $n$" "$WORK/gen/$n.yaml"
  check "$n: base config kept (hidden 32)" grep -q "^  hidden: 32$" "$WORK/gen/$n.yaml"
  check "$n: manifest line with $dp ranks" grep -qP "^$n\t$dp\tparallel.dp=$dp\ttraining.dtype=$dt$" "$WORK/gen/manifest.txt"
  check "$n: run_sweep.sh entry" grep -q "\"$n:0\"" "$WORK/gen/run_sweep.sh"
done
check "manifest lists 4 points" test "$(grep -vc '^#' "$WORK/gen/manifest.txt")" = 4
check "run_sweep.sh passes bash -n" bash -n "$WORK/gen/run_sweep.sh"
check "generated configs load" "$LOOM" config show "$WORK/gen/${GRID[3]}.yaml" >/dev/null
"$LOOM" sweep generate "$WORK/grid.yaml" --output-dir "$WORK/gen" >/dev/null 2>&1
check "generate refuses to overwrite without --force" test $? != 0
check "generate --force replaces" "$LOOM" sweep generate "$WORK/grid.yaml" --output-dir "$WORK/gen" --force >/dev/null

# ---- grid: run the single-rank points through run_sweep.sh's skip flags ----------------------
sed -i 's/"tiny-gpt2_dp2_fp32:0"/"tiny-gpt2_dp2_fp32:1"/; s/"tiny-gpt2_dp2_bf16:0"/"tiny-gpt2_dp2_bf16:1"/' "$WORK/gen/run_sweep.sh"
(cd "$WORK" && LOOM="$LOOM" bash gen/run_sweep.sh --log-dir "$WORK/logs_grid" > "$WORK/grid.out")
check "grid sweep exits 0" test $? = 0
GLOG=$(ls -d "$WORK"/logs_grid/sweep_*)
for n in tiny-gpt2_dp1_fp32 tiny-gpt2_dp1_bf16; do
  check "$n: SUCCESS" test "$(csv_row "$GLOG/summary.csv" name $n status)" = SUCCESS
  check "$n: log written" grep -q "run directory:" "$GLOG/$n.log"
done
for n in tiny-gpt2_dp2_fp32 tiny-gpt2_dp2_bf16; do
  check "$n: SKIPPED by its skip flag" test "$(csv_row "$GLOG/summary.csv" name $n status)" = SKIPPED
  check "$n: no log for a skipped point" test ! -e "$GLOG/$n.log"
done
check "status lines printed" grep -q "SKIPPED.*tiny-gpt2_dp2_fp32" "$WORK/grid.out"
check "no colour codes without a terminal" test -z "$(grep -P '\x1b\[' "$WORK/grid.out")"
check_summary_numbers "$GLOG"

# ---- random sweep with a failing point, 2 at a time -------------------------------------------
cat > "$WORK/random.yaml" <<'YAML'
name: rnd
base: base.yaml
overrides: [checkpoint.save_gradients=true]
parameters:
  training.lr: {values: [1e-3, 1e30]}
  model.hidden: {min: 32, max: 64, distribution: int_uniform, q: 16}
  training.weight_decay: {min: 0.01, max: 0.2, distribution: log_uniform}
strategy: random
num_runs: 4
seed: 7
YAML
"$LOOM" sweep run "$WORK/random.yaml" --parallel 2 --log-dir "$WORK/logs_rnd" > "$WORK/rnd.out" 2>&1
check "a sweep with a failed run exits 1" test $? = 1
RLOG=$(ls -d "$WORK"/logs_rnd/sweep_*)
check "4 random points" test "$(grep -c '' "$RLOG/summary.csv")" = 5
check "random configs kept in the log dir" test "$(ls "$RLOG"/configs/*.yaml | wc -l)" = 4
nfail=0 nok=0
"$LOOM" runs --runs-dir "$RUNS" --sweep rnd --format csv --show name status training.lr model.hidden \
  training.weight_decay sweep sweep_id ranks error run_dir > "$WORK/rnd_runs.csv"
check "4 runs registered under the sweep" test "$(grep -c '' "$WORK/rnd_runs.csv")" = 5
for cfg in "$RLOG"/configs/*.yaml; do
  n=$(basename "$cfg" .yaml)
  lr=$(sed -n 's/^  lr: //p' "$cfg") h=$(sed -n 's/^  hidden: //p' "$cfg") wd=$(sed -n 's/^  weight_decay: //p' "$cfg")
  check "$n: hidden in [32, 64], a multiple of 16" awk -v h="$h" 'BEGIN { exit !(h >= 32 && h <= 64 && h % 16 == 0) }'
  check "$n: weight decay in [0.01, 0.2]" awk -v w="$wd" 'BEGIN { exit !(w >= 0.01 && w <= 0.2) }'
  check "$n: name spells hidden" test "${n#*_h$h}" != "$n"
  check "$n: registry lr = config" close_to "$(csv_row "$WORK/rnd_runs.csv" name "$n" training.lr)" "$lr" 0
  check "$n: registry hidden = config" test "$(csv_row "$WORK/rnd_runs.csv" name "$n" model.hidden)" = "$h"
  check "$n: registry sweep id = log dir" test "$(csv_row "$WORK/rnd_runs.csv" name "$n" sweep_id)" = "$(basename "$RLOG")"
  check "$n: registry ranks" test "$(csv_row "$WORK/rnd_runs.csv" name "$n" ranks)" = 1
  if [ "$lr" = 1.0e+30 ]; then
    nfail=$((nfail + 1))
    check "$n: failing point FAILED in summary" test "$(csv_row "$RLOG/summary.csv" name "$n" status)" = FAILED
    check "$n: registry status failed" test "$(csv_row "$WORK/rnd_runs.csv" name "$n" status)" = failed
    check "$n: registry error says NaN" grep -q "^$n,failed,.*NaN" "$WORK/rnd_runs.csv"
  else
    nok=$((nok + 1))
    check "$n: SUCCESS in summary" test "$(csv_row "$RLOG/summary.csv" name "$n" status)" = SUCCESS
    check "$n: registry status finished" test "$(csv_row "$WORK/rnd_runs.csv" name "$n" status)" = finished
  fi
done
check "the seed gives failing and finishing points" test "$nfail" -ge 1 -a "$nok" -ge 1
check "failure shown with its log" grep -q "FAILED.*see $RLOG/.*\.log" "$WORK/rnd.out"
check "summary totals" grep -q "Totals: 4 runs: $nok succeeded, $nfail failed" "$RLOG/summary.txt"
check_summary_numbers "$RLOG"
check "summary rebuilt by 'loom sweep summary'" "$LOOM" sweep summary "$RLOG" > /dev/null

# ---- loom runs ----------------------------------------------------------------------------
R=(--runs-dir "$RUNS")
total=$("$LOOM" runs "${R[@]}" --format csv --show run_id | tail -n +2 | wc -l)
check "6 runs in the registry" test "$total" = 6
out=$("$LOOM" runs "${R[@]}" --filter "training.lr > 1e-2 AND status = 'failed'" --format csv --show name)
check "filter: failed lr>1e-2 runs = failing points" test "$(echo "$out" | tail -n +2 | wc -l)" = "$nfail"
out=$("$LOOM" runs "${R[@]}" --filter "name LIKE 'TINY-GPT2_dp1%'" --format csv --show name)
check "filter: LIKE ignores case" test "$(echo "$out" | tail -n +2 | sort | tr '\n' ' ')" = "tiny-gpt2_dp1_bf16 tiny-gpt2_dp1_fp32 "
err=$("$LOOM" runs "${R[@]}" --filter "status = 'finished' AND trainig.lr > 1" 2>&1 >/dev/null)
check "filter error exits 1" test $? = 1
check "filter error names the column" grep -q "column 25: unknown column 'trainig.lr' (did you mean 'training.lr'?)" <<< "$err"
out=$("$LOOM" runs "${R[@]}" --filter "status = 'finished'" --sort-by final_loss --descending --format csv --show final_loss)
check "sort-by --descending" test "$(echo "$out" | tail -n +2)" = "$(echo "$out" | tail -n +2 | sort -gr)"
check "limit" test "$("$LOOM" runs "${R[@]}" --limit 2 --format csv --show name | tail -n +2 | wc -l)" = 2
out=$("$LOOM" runs "${R[@]}" --sweep grid --hide start_time ranks)
check "table lists the sweep's runs" grep -q "tiny-gpt2_dp1_bf16" <<< "$out"
check "default columns include the varying config key" grep -q "training.dtype" <<< "$out"
check "--hide drops a column" test -z "$(grep start_time <<< "$out")"
"$LOOM" runs "${R[@]}" --format json > "$WORK/runs.json"
check "json output parses" python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d) == 6" "$WORK/runs.json"
first=$("$LOOM" runs "${R[@]}" --sweep grid --format csv --show run_id | sed -n 2p)
second=$("$LOOM" runs "${R[@]}" --sweep grid --format csv --show run_id | sed -n 3p)
check "set-metric" "$LOOM" runs "${R[@]}" set-metric "${first:0:20}" eval.acc=0.75 note=good >/dev/null
check "set-metric rejects a built-in column" test "$("$LOOM" runs "${R[@]}" set-metric "$first" status=x 2>&1 | grep -c built-in)" = 1
check "custom metric listed as a column" grep -q "^eval.acc  *custom" <<< "$("$LOOM" runs "${R[@]}" --list-columns)"
check "config keys listed as columns" grep -q "^training.lr  *config" <<< "$("$LOOM" runs "${R[@]}" --list-columns)"
check "filter on a custom metric" test "$("$LOOM" runs "${R[@]}" --filter "eval.acc >= 0.7" --format csv --show run_id | tail -n 1)" = "$first"
"$LOOM" runs "${R[@]}" export --csv "$WORK/export.csv" --all-columns > /dev/null
check "export: header has every config key" grep -q "training.lr.*checkpoint.save_gradients.*eval.acc" "$WORK/export.csv"
check "export: one line per run" test "$(wc -l < "$WORK/export.csv")" = 7
out=$("$LOOM" runs "${R[@]}" show "$first")
check "show: checkpoints" grep -q "final_checkpoint: model.safetensors" <<< "$out"
check "show: log path" grep -q "train.log .*/$first/train.log" <<< "$out"
check "show: custom metric" grep -q "eval.acc *0.75" <<< "$out"
out=$("$LOOM" runs "${R[@]}" compare "$first" "$second")
check "compare: config difference" grep -q "^training.dtype  *fp32  *bf16\|^training.dtype  *bf16  *fp32" <<< "$out"
check "compare: metrics table" grep -q "^final_loss" <<< "$out"
"$LOOM" runs "${R[@]}" plot "$first" "$second" --metric loss --output "$WORK/loss.svg" > /dev/null
check "plot written" test -f "$WORK/loss.svg"
check "plot: two curves" test "$(grep -c '<polyline' "$WORK/loss.svg")" = 2
check "plot: legend names the runs" grep -q ">tiny-gpt2_dp1_fp32<" "$WORK/loss.svg"
check "plot: axis label" grep -q 'class="label">step<' "$WORK/loss.svg"
# the same picture as a PNG: the right size, and the curves' colours drawn on the white page
"$LOOM" runs "${R[@]}" plot "$first" "$second" --metric loss --output "$WORK/loss.png" > /dev/null
/usr/bin/python3 - "$WORK/loss.png" <<'PY' && pass || fail "PNG plot"
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
assert im.size == (900, 540), im.size
colours = {p for p in im.getdata() if not (p[0] == p[1] == p[2])}
assert len(colours) > 20, len(colours)   # anti-aliased coloured curves, not a blank page
PY
check "plot of an unknown metric fails" test "$("$LOOM" runs "${R[@]}" plot "$first" --metric nope 2>&1 | grep -c 'no numeric')" = 1

# ---- gradients saved with the checkpoint --------------------------------------------------------
ok_run=$("$LOOM" runs "${R[@]}" --sweep rnd --filter "status = 'finished'" --format csv --show run_dir | sed -n 2p)
check "gradients.safetensors beside the weights" test -f "$ok_run/final_checkpoint/gradients.safetensors"
out=$("$LOOM" ckpt grad-norms "$ok_run/final_checkpoint")
check "grad-norms lists tensors" grep -q "^wte\|^tok_emb\|embed" <<< "$out"
gn=$(sed -n 's/^global norm \([^ ]*\) .*/\1/p' <<< "$out")
last=$(sed -n '$s/.*"grad_norm": \([^,]*\),.*/\1/p' "$ok_run/metrics.jsonl")
check "grad-norms global norm = last step's grad_norm (no clipping)" awk -v a="$gn" -v b="$last" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }'
check "grad-norms --json" python3 -c "import json,sys; d=json.loads(sys.stdin.read()); assert d['tensors'] and d['total_l2'] > 0" <<< "$("$LOOM" ckpt grad-norms "$ok_run/final_checkpoint" --json)"
check "grad-norms without gradients explains" test "$("$LOOM" ckpt grad-norms "$("$LOOM" runs "${R[@]}" --sweep grid --format csv --show run_dir | sed -n 2p)/final_checkpoint" 2>&1 | grep -c save_gradients)" = 1

# ---- Slurm launcher ------------------------------------------------------------------------------
"$LOOM" sweep run "$WORK/gen" --launcher slurm --dry-run --log-dir "$WORK/logs_slurm" --partition part1 \
  --account acct1 --time 00:05:00 --ntasks-per-node 1 --cpus-per-task 2 --gpus-per-node 1 > /dev/null
check "slurm dry run exits 0" test $? = 0
SLOG=$(ls -d "$WORK"/logs_slurm/sweep_*)
S=$SLOG/slurm/tiny-gpt2_dp2_bf16.sbatch
check "slurm script written" test -f "$S"
check "slurm script passes bash -n" bash -n "$S"
for want in "--ntasks=2" "--nodes=2" "--ntasks-per-node=1" "--cpus-per-task=2" "--gpus-per-node=1" \
  "--time=00:05:00" "--partition=part1" "--account=acct1" "--output=$SLOG/tiny-gpt2_dp2_bf16.log"; do
  check "slurm script asks for $want" grep -qx -- "#SBATCH $want" "$S"
done
check "slurm script runs srun loom train CONFIG" grep -q "^srun '.*loom' train '$WORK/gen/tiny-gpt2_dp2_bf16.yaml'$" "$S"
check "slurm script: 1 rank point asks for 1 task" grep -qx -- "#SBATCH --ntasks=1" "$SLOG/slurm/tiny-gpt2_dp1_fp32.sbatch"
check "dry run: nothing submitted" test "$(csv_col "$SLOG/summary.csv" status | sort -u)" = DRY-RUN
printf '#!/bin/sh\necho "$@" >> %s/sbatch.calls\necho 4242\n' "$WORK" > "$WORK/fake_sbatch"
chmod +x "$WORK/fake_sbatch"
"$LOOM" sweep run "$WORK/gen" --launcher slurm --sbatch "$WORK/fake_sbatch" --log-dir "$WORK/logs_slurm2" > /dev/null
check "sbatch called once per point" test "$(grep -c -- '--parsable' "$WORK/sbatch.calls")" = 4
check "job id kept" test "$(csv_col "$(ls -d "$WORK"/logs_slurm2/sweep_*)/summary.csv" job_id | sort -u)" = 4242
check "submitted jobs pending until they register" test "$(csv_col "$(ls -d "$WORK"/logs_slurm2/sweep_*)/summary.csv" status | sort -u)" = PENDING

# ---- --stop-on-failure: the first point fails, the rest are not started -------------------------
printf 'name: stop\nbase: base.yaml\nparameters: {training.lr: [1e30, 1e-3, 2e-3]}\n' > "$WORK/stop.yaml"
"$LOOM" sweep run "$WORK/stop.yaml" --stop-on-failure --color always --log-dir "$WORK/logs_stop" > "$WORK/stop.out" 2>&1
check "--stop-on-failure exits 1" test $? = 1
check "--color always: red FAILED" grep -qP '\x1b\[31mFAILED' "$WORK/stop.out"
check "--color always: yellow SKIPPED" grep -qP '\x1b\[33mSKIPPED' "$WORK/stop.out"
statuses=$(csv_col "$(ls -d "$WORK"/logs_stop/sweep_*)/summary.csv" status | tr '\n' ' ')
check "--stop-on-failure: a failure, then skipped points ($statuses)" test "$statuses" = "FAILED SKIPPED SKIPPED "
check "skipped points never registered" test "$("$LOOM" runs "${R[@]}" --sweep stop --format csv --show name | tail -n +2 | wc -l)" = 1
finish
