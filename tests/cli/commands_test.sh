#!/usr/bin/env bash
# The commands on the one option parser (src/cli/options.c), as a user meets them: each data
# subcommand takes its own options (as "--x V" and "--x=V") and refuses another's; a misspelt
# option gets "did you mean"; loom runs takes its options before or after the subcommand, each
# subcommand only its own, with its own --help (diff too, after options); loom sweep run takes
# a flag and its opposite (the last wins) and `loom sweep FILE` is `loom sweep run FILE`; the
# commands with subcommands answer help, nothing, --list-options, an unknown name and an
# option where the subcommand belongs, with their exit codes. Cheap: no training.
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom}")
WORK=$(mktemp -d /tmp/loom-cli-cmds.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
. "$(dirname "$0")/../loom.sh"
cd "$WORK" || exit 1

dym() { # want command...: fails, suggesting want
  local want=$1
  shift
  expect_fail "loom $* suggests $want" "did you mean '$want'" "$LOOM" "$@"
}

# ---- data: each subcommand its own table ----
run_loom data synth-text --out=s.txt --bytes 3000 --seed=7
expect_rc "data synth-text --out=F --bytes N --seed=S" 0
check "data synth-text wrote its corpus" test -s s.txt
run_loom data synth-text --out s.txt --bytes 100 --tokenizer t.json
expect_rc "data synth-text --tokenizer (another subcommand's option)" 1
expect_err "data synth-text --tokenizer: unknown option" \
  "loom data synth-text: unknown option '--tokenizer'"
run_loom data train-tokenizer --vocab-size=300 --out tok.json s.txt
expect_rc "data train-tokenizer --vocab-size=N --out F FILE" 0
run_loom data tokenize --tokenizer tok.json --out=s.bin --eot s.txt
expect_rc "data tokenize --tokenizer --out --eot" 0
run_loom data encode --tokenizer=tok.json --json --text hi
expect_rc "data encode --tokenizer= --json --text" 0
expect_out "data encode --json prints ids" '{"ids": ['
run_loom data encode --tokenizer tok.json --text hi
ids=$RUN_OUT
run_loom data decode --tokenizer tok.json $ids
expect_out "data decode of encode's ids" "hi"
run_loom data inspect-shard --tokenizer tok.json --count=4 s.bin
expect_out "data inspect-shard --count=4" "first 4 tokens"
run_loom data synth-vqa --out vqa --samples 4 --shard-size=2 --image-size 28 --types colour \
  --blank-images --split 1,1,0 --vocab-size 300 --seed 2 --distractors 0
expect_rc "data synth-vqa with every option" 0
run_loom data prepare vqa --split=1,1,0 --strict
expect_rc "data prepare DIR --split= --strict" 0
run_loom data inspect vqa --samples 1 --split val --min-pixels=784 --max-pixels 784
expect_rc "data inspect PATH --samples --split --min-pixels= --max-pixels" 0
run_loom data prepare vqa extra
expect_rc "data prepare: a second path" 1
expect_err "data prepare: a second path named" "unexpected argument 'extra'"
dym --eot data tokenize --eto
dym --blank-images data synth-vqa --blank-image
dym --strict data prepare vqa --strct
dym --min-pixels data inspect vqa --min-pixel 9
dym --seed data synth-text --sed 3

# ---- runs: the subcommand anywhere among the options, each with its own table ----
mkdir a b
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n' > a/metrics.jsonl
cp a/metrics.jsonl b/metrics.jsonl
run_loom runs diff a b --rtol=0 --worst 0 --common-steps
expect_rc "runs diff A B --rtol= --worst --common-steps" 0
run_loom runs --metric loss --db none.db diff a b --atol 0
expect_rc "runs OPTIONS diff A B: options before the subcommand" 0
run_loom runs diff a b --heartbeat-timeout 3
expect_rc "runs diff --heartbeat-timeout (not a diff option)" 2
expect_err "runs diff: unknown option, named" "loom runs diff: unknown option '--heartbeat-timeout'"
run_loom runs gc --port 1
expect_rc "runs gc --port (a serve option)" 2
expect_err "runs gc --port: unknown option" "loom runs gc: unknown option '--port'"
run_loom runs show x --filter "a = 1"
expect_err "runs show --filter (a list option)" "loom runs show: unknown option '--filter'"
run_loom runs --db none.db show x
expect_rc "runs --db F show ID: a missing registry" 1
expect_err "runs --db F show: the subcommand's message" \
  "loom runs show: no run registry at 'none.db'"
run_loom runs --db none.db --limit 3 --dry-run
expect_err "runs (list) --dry-run: a gc option" "loom runs: unknown option '--dry-run'"
for sub in list show compare set-metric export plot serve delete gc diff; do
  run_loom runs --db none.db "$sub" --help
  expect_rc "runs --db F $sub --help" 0
  check "runs --db F $sub --help: its own usage" grep -qE "^usage: loom runs \[?$sub" "$RUN_DIR/out"
done
run_loom runs --help
expect_out "runs --help: the overview" "loom runs diff A B"
dym --files runs --db none.db delete x --fils
dym --sweeps-dir runs serve --sweep-dir d
dym diff runs --db none.db dif a b

# ---- sweep: a flag and its opposite; sweep FILE ----
cat > s.yaml <<'YAML'
name: tiny
overrides: [model.preset=gpt2-124m, training.seq_len=256]
parameters:
  training.lr: [1e-3, 2e-3]
YAML
run_loom sweep run s.yaml --launcher=sim --dry-run --stop-on-failure --continue-on-failure \
  --log-dir logs
expect_rc "sweep run --stop-on-failure --continue-on-failure (the last wins)" 0
expect_out "sweep run --dry-run prints the points" "DRY-RUN"
run_loom sweep s.yaml --launcher sim --dry-run --log-dir logs
expect_rc "sweep FILE: sweep run FILE" 0
run_loom sweep s.yaml --help
expect_out "sweep FILE --help: run's usage" "usage: loom sweep run"
run_loom sweep --dry-run
expect_rc "sweep --dry-run (an option before the subcommand)" 2
expect_err "sweep --dry-run: options follow the subcommand" "options follow the subcommand"
dym --continue-on-failure sweep run s.yaml --continue-on-failur

# ---- commands with subcommands: help, nothing, --list-options, unknown ----
for c in data:1 ckpt:1 config:1 model:2 sched:2 sweep:2; do
  cmd=${c%:*} bad=${c#*:}
  for h in help --help -h; do
    run_loom "$cmd" "$h"
    expect_rc "$cmd $h" 0
    check "$cmd $h: usage on stdout" grep -q "usage: loom $cmd" "$RUN_DIR/out"
  done
  run_loom "$cmd"
  expect_rc "$cmd alone" "$bad"
  check "$cmd alone: usage on stderr" grep -q "usage: loom $cmd" "$RUN_DIR/err"
  run_loom "$cmd" --list-options
  expect_rc "$cmd --list-options (none of its own)" 0
  run_loom "$cmd" frobnicate
  expect_rc "$cmd frobnicate" "$bad"
  expect_err "$cmd frobnicate: unknown subcommand" "loom $cmd: unknown subcommand 'frobnicate'"
  run_loom "$cmd" --frobnicate
  expect_rc "$cmd --frobnicate" "$bad"
  expect_err "$cmd --frobnicate: options follow the subcommand" \
    "unknown option '--frobnicate' (options follow the subcommand"
done
finish
