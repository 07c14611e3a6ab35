# Hydra habits end to end through `loom train`: -m/--multirun expands comma lists and
# range() into a grid run by the sweep runner (N runs with the right values, per-run logs,
# summary, registry rows under the sweep), config group choices inside a multirun, +key user
# keys (config.yaml, registry column, --filter, swept by -m, the errors), run.tags and
# run.notes (registry, HAS filter, loom runs show).
. "$(dirname "${BASH_SOURCE[0]}")/../experiments.sh"
make_data || { echo "cannot make the test data"; exit 1; }
cd "$WORK"
DB=$WORK/runs/registry.db
runs() { "$LOOM" runs --db "$DB" "$@"; }
mkdir -p configs/model
printf 'preset: tiny-llama\nvocab_size: 300\nhidden: 32\nheads: 4\nkv_heads: 2\nlayers: 1\nmax_seq: 32\n' > configs/model/mini-llama.yaml

# -m: 2 x 3 grid (a comma list and a range), a fixed override, a group choice, a user key
"$LOOM" train -m base.yaml training.lr=1e-3,3e-3 'training.steps=range(2,7,2)' run.seed=5 \
  model=mini-llama +exp.hypothesis=warmup_helps > mr.out 2> mr.err
check "multirun exits 0" test $? = 0
dir=$(sed -n 's/^multirun: 6 runs; sweep directory //p' mr.out)
check "multirun prints its sweep directory" test -n "$dir" -a -d "$dir"
check "sweep directory under ./logs" test "$(dirname "$dir")" = "$WORK/logs"
check "summary.txt written" test -f "$dir/summary.txt"
check "6 rows in summary.csv" test "$(($(grep -c '' "$dir/summary.csv") - 1))" = 6
check "6 SUCCESS rows" test "$(awk -F, 'NR > 1 && $2 == "SUCCESS"' "$dir/summary.csv" | wc -l)" = 6
check "one log per run" test "$(ls "$dir"/*.log | wc -l)" = 6
check_summary_numbers "$dir"
runs --sweep multirun --format csv --show name training.lr training.steps run.seed model.preset \
  exp.hypothesis --sort-by training.lr > mr.csv
check "6 registry rows under sweep multirun" test "$(($(grep -c '' mr.csv) - 1))" = 6
# every (lr, steps) pair exactly once: 1e-3/3e-3 x 2/4/6 (range end excluded)
pairs=$(awk -F, 'NR > 1 { print $2 "/" $3 }' mr.csv | sort | tr '\n' ' ')
check "grid values (got $pairs)" test "$pairs" = "0.001/2 0.001/4 0.001/6 0.003/2 0.003/4 0.003/6 "
check "fixed override in every run" test "$(awk -F, 'NR > 1 { print $4 }' mr.csv | sort -u)" = 5
check "group choice in every run" test "$(awk -F, 'NR > 1 { print $5 }' mr.csv | sort -u)" = tiny-llama
check "user key in every run" test "$(awk -F, 'NR > 1 { print $6 }' mr.csv | sort -u)" = warmup_helps
# each run really trained its steps: metrics.jsonl has that many lines
for rd in $(runs --sweep multirun --format csv --show run_dir training.steps | tail -n +2); do
  d=${rd%,*} s=${rd##*,}
  check "$(basename "$d"): $s steps in metrics.jsonl" test "$(grep -c '"step"' "$d/metrics.jsonl")" = "$s"
  check "$(basename "$d"): config.yaml keeps the user key" grep -qx '+exp.hypothesis: "warmup_helps"' "$d/config.yaml"
done

# a user key swept by -m; --filter on it
"$LOOM" train -m base.yaml +exp.variant=a,b run.name=uv > uv.out 2>&1
check "multirun over a user key exits 0" test $? = 0
check "user-key sweep: 2 runs" grep -q '^multirun: 2 runs' uv.out
check "filter on a user key" test "$(runs --filter "exp.variant = 'b'" --format csv --show exp.variant | tail -n +2)" = b
check "user key as a column of the sweep" test "$(runs --filter "exp.variant IS NOT NULL" --format csv --show exp.variant --sort-by exp.variant | tail -n +2 | tr '\n' ' ')" = "a b "

# user keys in a sweep file's overrides and on `loom sweep run`'s command line
printf 'name: swu\nbase: base.yaml\noverrides: [+exp.origin=sweepfile]\nparameters:\n  training.lr: {values: [1e-3, 2e-3]}\n' > swu.yaml
"$LOOM" sweep run swu.yaml +exp.cli=yes > swu.out 2>&1
check "sweep run with user keys exits 0" test $? = 0
check "sweep file + CLI user keys in both runs" test "$(runs --sweep swu --format csv --show exp.origin exp.cli | tail -n +2 | sort -u)" = "sweepfile,yes"
check "sweep file: 2 runs" test "$(runs --sweep swu --format csv --show name | tail -n +2 | wc -l)" = 2

# -m errors: nothing swept, unknown key, bad range; nothing run
"$LOOM" train -m base.yaml training.lr=1e-3 > e1.out 2>&1
check "-m without a list fails" test $? = 2
check "-m without a list: says how" grep -q "no override has a list of values" e1.out
"$LOOM" train -m base.yaml training.lrr=1e-3,2e-3 > e2.out 2>&1
check "-m unknown key: did you mean" grep -q "unknown key 'training.lrr'; did you mean 'training.lr'" e2.out
"$LOOM" train -m base.yaml 'training.steps=range(5,2)' > e3.out 2>&1
check "-m empty range" grep -q "the range is empty" e3.out
"$LOOM" train -m base.yaml training.dtype=fp32,fp64 > e4.out 2>&1
check "-m bad value fails" test $? = 2
"$LOOM" train -m base.yaml model=mini-llama,tiny-gpt2 training.lr=1e-3,2e-3 > e5.out 2>&1
check "-m over a group's options: refused" test $? = 2
check "-m over a group's options: says what to do" grep -q "sweeping a config group's options is not supported" e5.out
check "no runs from failed multiruns" test "$(ls logs | wc -l)" = 3  # 2 multiruns + swu

# +key on a single run: config.yaml, registry column, filter, loom runs show
"$LOOM" train base.yaml +exp.hypothesis=cosine_wins '+exp.comment="a, b"' \
  'run.tags=[ablation, warmup]' 'run.notes=first warmup try' run.name=tagged --quiet > t.out
check "tagged run exits 0" test $? = 0
rdir=$(tail -1 t.out)
check "config.yaml: user key" grep -qx '+exp.hypothesis: "cosine_wins"' "$rdir/config.yaml"
check "config.yaml: quoted comma value" grep -qx '+exp.comment: "a, b"' "$rdir/config.yaml"
check "config.yaml: tags" grep -qx '  tags: "ablation,warmup"' "$rdir/config.yaml"
check "config.yaml: notes" grep -qx '  notes: "first warmup try"' "$rdir/config.yaml"
# config show of it prints it line for line, but for the model keys a preset fills in (shown
# with the preset's values, marked "# from model.preset X")
check "config.yaml loads back identically" bash -c 'paste -d "\t" <("$1" config show "$2") <(sed "s/  #.*//" "$2") |
  awk -F "\t" "\$1 != \$2 && \$1 !~ /  # from model.preset / { bad = 1 } END { exit bad }"' _ "$LOOM" "$rdir/config.yaml"
"$LOOM" train base.yaml 'run.tags=[ablation2]' run.name=tagged2 --quiet > /dev/null
check "filter HAS: exact tag" test "$(runs --filter "run.tags HAS 'ablation'" --format csv --show name | tail -n +2)" = tagged
check "filter NOT HAS" test "$(runs --filter "run.tags NOT HAS 'ablation' AND name LIKE 'tagged%'" --format csv --show name | tail -n +2)" = tagged2
check "filter on user key" test "$(runs --filter "exp.hypothesis = 'cosine_wins'" --format csv --show run.notes | tail -n +2)" = "first warmup try"
id=$(runs --filter "name = 'tagged'" --format csv --show run_id | tail -n +2)
runs show "$id" > show.out
check "runs show: tags" grep -qE '^  run.tags +ablation,warmup' show.out
check "runs show: notes" grep -qE '^  run.notes +first warmup try' show.out
check "runs show: user key" grep -qE '^  exp.hypothesis +cosine_wins' show.out

# user key errors
"$LOOM" train base.yaml exp.hypothesis=x > u1.out 2>&1
check "plain unknown key: error" test $? = 1
check "plain unknown key: +key hint" grep -q "use +exp.hypothesis=VALUE" u1.out
"$LOOM" train base.yaml +exp.h=1 +exp.h=2 > u2.out 2>&1
check "+key twice: ++ hint" grep -q "user key exp.h is already set (to '1'); use ++exp.h=VALUE" u2.out
"$LOOM" train base.yaml +hypothesis=1 > u3.out 2>&1
check "+key without a dot" grep -q "needs a dotted name" u3.out
"$LOOM" train base.yaml 'run.tags=[a, a]' > u4.out 2>&1
check "repeated tag" grep -q "tag 'a' is given twice" u4.out
check "failed runs register nothing" test "$(runs --format csv --show name | grep -c '')" = 13  # 6 + 2 + 2 (swu) + tagged + tagged2, and the header
finish
