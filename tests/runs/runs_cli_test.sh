#!/usr/bin/env bash
# `loom runs` as a new user meets it, on real tiny runs: `loom runs` before any run lists
# nothing with exit 0 and says where it looked (table, CSV, JSON); plot and diff take the plot
# file as --out, --output or -o alike; the subcommands' --help is their own; `runs show` never
# prints "(default )"; the default columns are chosen by what varies across the listed rows and
# what was asked (--sort-by), so a swept key and final_valid_loss survive a 100-column terminal.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
cd "$WORK"

# ---- no registry yet ---------------------------------------------------------------------------
run_loom runs
expect_rc "loom runs without a registry" 0
expect_out "... says there are no runs yet" "no runs yet"
expect_out "... and where it looked" "runs/registry.db"
run_loom runs --runs-dir "$WORK/nowhere" --format json
expect_rc "runs --format json without a registry" 0
check "... prints an empty JSON array" test "$RUN_OUT" = "[]"
expect_err "... says where it looked on stderr" "$WORK/nowhere/registry.db"
run_loom runs list --format csv --runs-dir "$WORK/nowhere"
expect_rc "runs list --format csv without a registry" 0
check "... prints nothing on stdout" test -z "$RUN_OUT"
run_loom runs show x
expect_rc "runs show ID without a registry: still an error" 1

# ---- subcommands' own help ---------------------------------------------------------------------
for sub in plot serve diff; do
  run_loom runs "$sub" --help
  check "runs $sub --help: its own usage ($(head -1 "$RUN_DIR/out"))" \
    grep -q "^usage: loom runs $sub" "$RUN_DIR/out"
done
run_loom sweep run --help
check "sweep run --help: its own usage" grep -q "^usage: loom sweep run" "$RUN_DIR/out"

# ---- two runs ----------------------------------------------------------------------------------
R=(--runs-dir "$WORK/runs")
for lr in 1e-3 3e-3; do
  "$LOOM" train base.yaml run.name=lr$lr training.lr=$lr data.val_fraction=0.1 \
    training.eval_every=3 training.eval_batches=1 --quiet > /dev/null || { echo "training failed"; exit 1; }
done

# ---- plot / diff: --out, --output and -o -------------------------------------------------------
for opt in --out --output -o; do
  rm -f p.svg d.svg
  run_loom runs "${R[@]}" plot lr1e-3 lr3e-3 --metric loss "$opt" p.svg
  expect_rc "runs plot $opt" 0
  check "runs plot $opt wrote the file" test -s p.svg
  run_loom runs "${R[@]}" diff lr1e-3 lr3e-3 "$opt" d.svg
  expect_rc "runs diff $opt (different runs: 1)" 1
  check "runs diff $opt wrote the file" test -s d.svg
done
run_loom runs "${R[@]}" plot lr1e-3 --out p.png
check "runs plot --out F.png writes a PNG" bash -c "head -c 8 p.png | grep -q PNG"

# ---- runs show: no "(default )" ---------------------------------------------------------------
run_loom runs "${R[@]}" show lr1e-3
expect_rc "runs show" 0
check "runs show never prints '(default )'" bash -c "! grep -q '(default )' '$RUN_DIR/out'"
expect_out "an empty default said in words" "(default: empty)"

finish
