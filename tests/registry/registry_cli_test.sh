#!/usr/bin/env bash
# `loom runs` / `loom help` defects fixed in the registry CLI, each checked on real tiny runs:
# --filter given twice combines with AND; an exact run name wins over a longer name it is a
# prefix of; the recorded command pastes back into a shell and re-runs the run (same losses,
# bitwise); a crashed run keeps the steps and losses of its metrics.jsonl (a cut last line
# skipped) although no heartbeat recorded them; a deleted run directory shows as 'missing',
# `runs gc` drops such rows (--dry-run only lists them), `runs delete` removes rows (and with
# --files the directory) and refuses a running run; "did you mean" for commands, subcommands
# and options; `loom help` lists every command and subcommand.
. "$(dirname "$0")/../experiments.sh"
make_data || { echo "could not make test data"; exit 1; }
cd "$WORK"
R=(--runs-dir "$WORK/runs")
col() { "$LOOM" runs "${R[@]}" --format csv "$@" | sed 1d; } # rows of one --show column
"$LOOM" train base.yaml run.name=lr1 training.lr=1e-3 --quiet > /dev/null &&
"$LOOM" train base.yaml run.name=lr10 training.lr=1e-2 --quiet > /dev/null &&
"$LOOM" train base.yaml run.name=other training.lr=1e-2 --quiet > /dev/null ||
  { echo "training failed"; exit 1; }

# --filter A --filter B: both apply (before: only B, which matched lr1 too)
got=$(col --filter "training.lr > 5e-3" --filter "name LIKE 'lr%'" --show name | tr '\n' ' ')
check "two --filter combine with AND (got '$got')" test "$got" = "lr10 "
got=$(col --filter "name LIKE 'lr%'" --filter "training.lr > 5e-3" --show name | tr '\n' ' ')
check "AND in either order (got '$got')" test "$got" = "lr10 "

# the unique name 'lr1' is a prefix of the run id of lr10 (lr10_...) and of lr1's: exact wins
id1=$(col --filter "name = 'lr1'" --show run_id)
out=$("$LOOM" runs "${R[@]}" show lr1 2>&1); rc=$?
check "exact name 'lr1' resolves, not ambiguous (rc $rc): $(head -c 200 <<< "$out")" test $rc = 0
check "... to the run named lr1" grep -q "$id1" <<< "$out"
check "... and not lr10" grep -Eq "^  name +lr1$" <<< "$out"
check "a real prefix of two ids is still ambiguous" bash -c "! '$LOOM' runs --runs-dir '$WORK/runs' show lr 2>/dev/null"

# the recorded command re-runs the run: quoted name with a space and a quote, same losses
"$LOOM" train base.yaml "run.name=it's pasted" training.lr=2e-3 --quiet > /dev/null
cmd=$(col --filter "name = 'it''s pasted'" --show command)
check "recorded command starts with 'loom train' ($cmd)" test "${cmd#loom train }" != "$cmd"
eval "${cmd/#loom/\"\$LOOM\"}" > /dev/null
dirs=$(col --filter "name = 'it''s pasted'" --show run_dir)
check "the pasted command registered a second run with the same name" test "$(wc -l <<< "$dirs")" = 2
d1=$(sed -n 1p <<< "$dirs"); d2=$(sed -n 2p <<< "$dirs")
l1=$(sed 's/.*"loss": \([^,]*\),.*/\1/' "$d1/metrics.jsonl"); l2=$(sed 's/.*"loss": \([^,]*\),.*/\1/' "$d2/metrics.jsonl")
check "the re-run's losses equal the original's (6 steps, all digits)" test "$l1" = "$l2" -a "$(wc -l <<< "$l1")" = 6

# a crashed run keeps its progress: no heartbeat is written (interval 1000 s), so only
# metrics.jsonl knows the steps; a line cut by the crash is skipped
LOOM_HEARTBEAT_INTERVAL=1000 "$LOOM" train base.yaml training.steps=100000000 run.name=victim \
  --quiet > /dev/null 2>&1 &
PID=$!
vdir=""
for _ in $(seq 200); do
  vdir=$(col --filter "name = 'victim'" --show run_dir 2>/dev/null)
  [ -n "$vdir" ] && [ "$(wc -l < "$vdir/metrics.jsonl" 2>/dev/null || echo 0)" -ge 5 ] && break
  sleep 0.1
done
out=$("$LOOM" runs "${R[@]}" delete victim 2>&1); rc=$?
check "delete refuses a running run (rc $rc: $out)" test $rc != 0 -a -d "$vdir"
grep -q "is running" <<< "$out" || fail "delete of a running run says why: $out"
kill -9 $PID; wait $PID 2>/dev/null
printf '{"step": 999999, "loss": 1.5, "lr": 0.00' >> "$vdir/metrics.jsonl" # cut last line
last=$(grep '}$' "$vdir/metrics.jsonl" | tail -1)
want_step=$(sed 's/{"step": \([0-9]*\),.*/\1/' <<< "$last")
want_loss=$(sed 's/.*"loss": \([^,]*\),.*/\1/' <<< "$last")
want_min=$(grep '}$' "$vdir/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/' | sort -g | head -1)
F=(--filter "name = 'victim'")
check "killed run is crashed" test "$(col "${F[@]}" --show status)" = crashed
check "crashed run keeps its steps ($(col "${F[@]}" --show steps) vs $want_step)" test "$(col "${F[@]}" --show steps)" = "$want_step"
# CSV prints REAL with %.17g: the loss parsed from metrics.jsonl's %.17g text is the same double
check "crashed run keeps its final loss ($want_loss)" close_to "$(col "${F[@]}" --show final_loss)" "$want_loss" 0
check "crashed run keeps its min loss ($want_min)" close_to "$(col "${F[@]}" --show min_loss)" "$want_min" 0
dur=$(col "${F[@]}" --show duration_s)
check "crashed run's duration is not 0 ($dur)" awk -v d="$dur" 'BEGIN { exit !(d > 0) }'

# failed and stopped runs (no summary.json) keep their progress too
LOOM_HEARTBEAT_INTERVAL=1000 "$LOOM" train base.yaml run.name=stop --stop-after 3 --quiet > /dev/null
LOOM_HEARTBEAT_INTERVAL=1000 "$LOOM" train base.yaml run.name=nan training.lr=1e8 training.steps=20 \
  --quiet > /dev/null 2>&1
for n in stop nan; do
  F=(--filter "name = '$n'")
  m=$(col "${F[@]}" --show run_dir)/metrics.jsonl
  want_step=$(tail -1 "$m" | sed 's/{"step": \([0-9]*\),.*/\1/')
  want_loss=$(tail -1 "$m" | sed 's/.*"loss": \([^,]*\),.*/\1/')
  want_min=$(sed 's/.*"loss": \([^,]*\),.*/\1/' "$m" | grep -v null | sort -g | head -1)
  check "$n: status $(col "${F[@]}" --show status)" test "$(col "${F[@]}" --show status)" = "$([ $n = nan ] && echo failed || echo stopped)"
  check "$n: steps = metrics.jsonl's last step ($want_step)" test "$(col "${F[@]}" --show steps)" = "$want_step"
  if [ "$want_loss" = null ]; then # the NaN step: final_loss is empty, as JSON wrote it
    check "$n: final loss empty for a NaN last step" test -z "$(col "${F[@]}" --show final_loss)"
  else
    check "$n: final loss = metrics.jsonl's last ($want_loss)" close_to "$(col "${F[@]}" --show final_loss)" "$want_loss" 0
  fi
  check "$n: min loss = metrics.jsonl's lowest ($want_min)" close_to "$(col "${F[@]}" --show min_loss)" "$want_min" 0
done
"$LOOM" runs "${R[@]}" delete stop nan > /dev/null

# a deleted run directory: 'missing'; gc --dry-run lists, gc drops; delete [--files]
odir=$(col --filter "name = 'other'" --show run_dir)
rm -rf "$odir"
check "deleted run directory shows status missing" test "$(col --filter "name = 'other'" --show status)" = missing
check "filter status = 'missing'" test "$(col --filter "status = 'missing'" --show name)" = other
out=$("$LOOM" runs "${R[@]}" gc --dry-run)
check "gc --dry-run lists the run ($out)" grep -q "would drop other_" <<< "$out"
check "gc --dry-run keeps the row" test "$(col --filter "name = 'other'" --show name)" = other
out=$("$LOOM" runs "${R[@]}" gc)
check "gc drops it ($out)" grep -q "^dropped 1 run " <<< "$out"
check "gc dropped only the missing run" test -z "$(col --filter "name = 'other'" --show name)" -a "$(col --show name | wc -l)" = 5
l10=$(col --filter "name = 'lr10'" --show run_dir)
"$LOOM" runs "${R[@]}" delete lr10 > /dev/null
check "delete removes the row" test -z "$(col --filter "name = 'lr10'" --show name)"
check "delete without --files keeps the directory" test -d "$l10"
"$LOOM" runs "${R[@]}" delete victim --files > /dev/null
check "delete --files removes the row and the directory" test -z "$(col --filter "name = 'victim'" --show name)" -a ! -e "$vdir"
check "delete of an unknown run fails" bash -c "! '$LOOM' runs --runs-dir '$WORK/runs' delete nosuchrun 2>/dev/null"

# the default table fits the terminal: a run with a long generated name (random-sweep style,
# longer than the 48 characters other text is cut at) and many config keys that differ
long=random_point_lr0.00123456789_wd0.0987654321_warm3_seed12345678
"$LOOM" train base.yaml "run.name=$long" training.lr=1.2345678e-3 training.weight_decay=0.0987654321 \
  training.warmup_steps=3 run.seed=12345678 training.beta2=0.987 --quiet > /dev/null
lid=$(col --filter "name = '$long'" --show run_id)
for width in 130 115; do # the id is 83 characters wide
  out=$(COLUMNS=$width "$LOOM" runs "${R[@]}")
  check "COLUMNS=$width: every line fits ($(awk '{ if (length($0) > m) m = length($0) } END { print m }' <<< "$out") chars)" \
    awk -v w=$width 'length($0) > w { exit 1 }' <<< "$out"
  check "COLUMNS=$width: the run id is printed whole" grep -q "^$lid " <<< "$out"
  check "COLUMNS=$width: the name column (the start of each id) gave way first" bash -c "! grep -q '^run_id  *name ' <<< \"\$1\"" _ "$out"
  check "COLUMNS=$width: final_loss (the result) kept" grep -q "^run_id  *final_loss " <<< "$out"
  check "COLUMNS=$width: status and steps, the same in every row, said in a note" \
    grep -q "(same in every row: .*steps 6, status finished)" <<< "$(tr '\n' ' ' <<< "$out")"
  check "COLUMNS=$width: no cell is cut with ..." bash -c "! grep -q '[^,]\.\.\.' <<< \"\$1\"" _ "$out"
  check "COLUMNS=$width: a note names the hidden columns" grep -q "hidden to fit $width characters: name, .*training\.\(beta2\|weight_decay\|warmup_steps\)" <<< "$(tr '\n' ' ' <<< "$out")"
done
out=$(COLUMNS=60 "$LOOM" runs "${R[@]}")
check "narrower than an id: the id stays whole, run_id alone is left" grep -qx "$lid" <<< "$out"
out=$(COLUMNS=1000 "$LOOM" runs "${R[@]}")
check "a wide terminal hides nothing" bash -c "! grep -q hidden <<< \"\$1\"" _ "$out"
check "a wide terminal shows every differing key" grep -q "training.weight_decay" <<< "$out"
out=$("$LOOM" runs "${R[@]}" | head -1) # not a terminal, no COLUMNS: 100
check "without a terminal the table is 100 wide at most" test "${#out}" -le 100
out=$(COLUMNS=60 "$LOOM" runs "${R[@]}" --show run_id,training.weight_decay,training.beta2,min_loss)
check "--show prints what was asked whatever the width" grep -q "training.beta2  min_loss" <<< "$out"

# did you mean: commands, subcommands, options
dym() { # expected-suggestion command...
  local want=$1; shift
  local out; out=$("$@" 2>&1) && { fail "$* should fail"; return; }
  check "'$*' suggests $want: $(head -1 <<< "$out")" grep -q "did you mean '$want'" <<< "$out"
}
dym train "$LOOM" trian
dym help "$LOOM" hepl
dym runs "$LOOM" help rusn
dym list "$LOOM" runs lst
dym diff "$LOOM" runs dif
dym --filter "$LOOM" runs "${R[@]}" --fitler x
dym synth-text "$LOOM" data synth-txt
dym inspect "$LOOM" ckpt inspct
dym schema "$LOOM" config schem
dym validate "$LOOM" sched valdate
dym summary "$LOOM" sweep sumary
# an option misspelt, for every command
dym --quiet "$LOOM" train base.yaml --quiett
dym --json "$LOOM" eval --jsn x
dym --hardware "$LOOM" sim --hardwre h100-sxm
dym --model "$LOOM" plan --modle gpt2-124m
dym --tokenizer "$LOOM" data encode --tokenzer x
dym --pp "$LOOM" sched show --p 2
dym --quick "$LOOM" bench --quik
dym --seq "$LOOM" bench model --sq 3
dym --rtol "$LOOM" ckpt compare a b --rtl 1
dym --json "$LOOM" ckpt inspect --jsn
dym --sort "$LOOM" ckpt grad-norms --srt
dym --force "$LOOM" sweep generate --forse x
dym --dry-run "$LOOM" sweep run x.yaml --dryrun
dym --help "$LOOM" config show --hlp
dym --files "$LOOM" runs "${R[@]}" delete x --fils
# loom help: every command of the dispatcher and the subcommands users look for
h=$("$LOOM" help)
for c in train eval data ckpt config model sweep runs sched sim plan generate bench version "runs serve" "runs diff" \
         "runs delete" "runs gc" "runs plot" "ckpt export" "data synth-vqa" "bench model"; do
  check "loom help lists '$c'" grep -q "^  $c " <<< "$h"
done
finish
