#!/usr/bin/env bash
# `loom runs` as a new user meets it, on real tiny runs: `loom runs` before any run lists
# nothing with exit 0 and says where it looked (table, CSV, JSON); plot and diff take the plot
# file as --out, --output or -o alike; the subcommands' --help is their own; `runs show` never
# prints "(default )"; the default columns are chosen by what varies across the listed rows and
# what was asked (--sort-by, --filter), so the swept keys and final_valid_loss of a sweep survive
# a 100-column terminal; a sweep's summary.txt has summary.csv's validation columns.
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

# ---- a run's config.yaml: the values the preset fills in, in comments ---------------------------
cfg=$("$LOOM" runs "${R[@]}" --filter "name = 'lr1e-3'" --show run_dir --format csv | tail -1)/config.yaml
check "config.yaml keeps hidden as given (32)" grep -qx "  hidden: 32" "$cfg"
check "config.yaml: head_dim 0 with the resolved 8 in a comment" grep -qx "  head_dim: 0  # 8: from model.preset tiny-gpt2" "$cfg"
check "config.yaml: arch from the preset in a comment" grep -qx '  arch: ""  # gpt2: from model.preset tiny-gpt2' "$cfg"
run_loom config show "$cfg"
check "config show of it: the same model, resolved" grep -qx "  head_dim: 8  # from model.preset tiny-gpt2" "$RUN_DIR/out"

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

# ---- columns by what varies: a sweep's swept keys and final_valid_loss at 100 columns ---------
cat > sweep.yaml <<YAML
name: cols
base: $WORK/base.yaml
overrides: [data.val_fraction=0.1, training.eval_every=3, training.eval_batches=1]
parameters:
  training.lr: {values: [1e-3, 3e-3]}
  training.warmup_steps: {values: [1, 2]}
strategy: grid
YAML
"$LOOM" sweep run sweep.yaml > sweep.out 2>&1 || { cat sweep.out; fail "sweep run"; }
S=(--runs-dir "$WORK/runs" --sweep cols)
out=$(COLUMNS=100 "$LOOM" runs "${S[@]}")
head1=$(head -1 <<< "$out")
for c in run_id final_valid_loss training.lr training.warmup_steps; do
  check "COLUMNS=100: $c shown (header: $head1)" grep -qw -- "$c" <<< "$head1"
done
check "COLUMNS=100: every line fits" awk 'length($0) > 100 { exit 1 }' <<< "$out"
check "COLUMNS=100: status and steps, the same in every row, in a note" \
  grep -q "(same in every row: .*steps 6.*status finished" <<< "$(tr '\n' ' ' <<< "$out")"
out=$(COLUMNS=80 "$LOOM" runs "${S[@]}" --sort-by min_loss)
check "COLUMNS=80 --sort-by min_loss: the sort column is shown" grep -qw min_loss <<< "$(head -1 <<< "$out")"
check "COLUMNS=80: every line fits" awk 'length($0) > 80 { exit 1 }' <<< "$out"
out=$(COLUMNS=70 "$LOOM" runs "${S[@]}")
check "COLUMNS=70: final_valid_loss before a swept key" \
  test "$(head -1 <<< "$out" | tr -s ' ')" = "run_id final_valid_loss"
out=$(COLUMNS=70 "$LOOM" runs "${S[@]}" --filter "training.warmup_steps >= 1")
check "COLUMNS=70: a key named in --filter before the rest" \
  test "$(head -1 <<< "$out" | tr -s ' ')" = "run_id training.warmup_steps"

# ---- sweep summary.txt: the validation columns of summary.csv ---------------------------------
dir=$(sed -n 's/.*summary: \(.*\)\/summary.txt.*/\1/p' sweep.out)
check "summary.txt has the validation columns" grep -q "Final Val Loss | Final Val PPL | Min Val Loss" "$dir/summary.txt"
for name in $(awk -F, 'NR > 1 { print $1 }' "$dir/summary.csv"); do
  row=$(grep "^$name " "$dir/summary.txt" | tr -d ' ')
  for k in 10:final_valid_loss 11:final_valid_perplexity 12:min_valid_loss; do
    csv=$(csv_row "$dir/summary.csv" name "$name" "${k#*:}")
    check "$name: summary.txt ${k#*:} = summary.csv's ($csv)" \
      close_to "$(cut -d'|' -f"${k%%:*}" <<< "$row")" "$csv" 1e-4
  done
done

finish
