#!/usr/bin/env bash
# The seed experiment workflow walked through as a user would, through the `loom` executable
# only (issue 13, "Done means"), in a fresh directory with the default registry (runs/):
#   1. a config with a group (`defaults:` + model=<option>) and a +key user key
#   2. a -m multirun over two lrs
#   3. a grid and a random sweep (`loom sweep run`)
#   4. a run killed with SIGKILL mid-training: the registry says crashed, with its progress
#   5. the killed run resumed with its own config: the same run id continues to the end, with
#      the losses of the same config run without interruption, bit for bit
#   6. a fork: resumed with a changed key: a new run id whose parent_id is the first run, the
#      parent's directory left byte for byte as it was
#   7. loom runs: --filter (twice: AND) / --sort-by / --show / --hide / --limit against the
#      same rule applied by Python to `--format json --all-columns`; loom runs show
#   8. loom runs diff: a TP run and a DP run of one model (exit 0); two lrs (exit 1)
#   9. the dashboard (loom runs serve) in headless Chromium: rows, a curve, no console error,
#      a screenshot saved under the build directory
# Tiny models and few steps: about a minute on 2 cores.
# usage: experiment_walkthrough_test.sh path/to/loom SCREENSHOT.png
set -u
LOOM=$(realpath "${1:?usage: $0 path/to/loom SCREENSHOT.png}")
SHOT=${2:?usage: $0 path/to/loom SCREENSHOT.png}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/loom-walkthrough.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
. "$HERE/../loom.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NO_COLOR=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
unset LOOM_REGISTRY LOOM_SWEEP LOOM_SWEEP_ID
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
PY=/usr/bin/python3
cd "$WORK" || exit 1
START=$SECONDS
step() { echo "== $* ($((SECONDS - START)) s)"; }
# csv rows of `loom runs` (header dropped)
rows() { "$LOOM" runs --format csv "$@" | tail -n +2; }
field() { rows --filter "name = '$1'" --show "$2"; } # name column
id_of() { field "$1" run_id; }
dir_of() { field "$1" run_dir; }
tree_state() { (cd "$1" && find . | sort && find . -type f | sort | xargs sha256sum); }

step "data: a story corpus, a 300-token BPE tokenizer, a token shard"
mkdir -p data
run_loom data synth-text --out data/corpus.txt --bytes 60000 --seed 3 && \
run_loom data train-tokenizer --vocab-size 300 --out data/tok.json data/corpus.txt && \
run_loom data tokenize --tokenizer data/tok.json --out data/train.bin data/corpus.txt
expect_rc "data made by loom" 0

step "1. a config with a group and a +key"
mkdir -p configs/model sweeps
printf 'preset: tiny-gpt2\nvocab_size: 300\nhidden: 32\nheads: 4\nlayers: 1\nmax_seq: 32\n' > configs/model/mini-gpt2.yaml
printf 'preset: tiny-llama\nvocab_size: 300\nhidden: 32\nheads: 4\nkv_heads: 2\nlayers: 1\nmax_seq: 32\n' > configs/model/mini-llama.yaml
cat > configs/walk.yaml <<YAML
defaults:
  - model: mini-gpt2
  - _self_
run: {name: walk, output_dir: runs}
training: {seq_len: 16, micro_batch_size: 2, steps: 6, log_every: 1, grad_clip: 0, warmup_steps: 1}
data: {train_shards: $WORK/data/train.bin, tokenizer: $WORK/data/tok.json}
YAML
run_loom config show configs/walk.yaml model=mini-llama +exp.hypothesis=gqa_helps
expect_rc "config show with a group choice and a +key" 0
expect_out "model=mini-llama selects configs/model/mini-llama.yaml" '  preset: tiny-llama'
expect_out "the +key is in the resolved config" '+exp.hypothesis: "gqa_helps"'
run_loom train configs/walk.yaml model=mini-llama +exp.hypothesis=gqa_helps run.name=grouped --quiet
expect_rc "train the grouped config" 0
check "registry: the group's model and the user key as columns" \
  test "$(rows --filter "name = 'grouped'" --show model.preset,model.kv_heads,exp.hypothesis)" = "tiny-llama,2,gqa_helps"
check "default model (no choice): the defaults list's mini-gpt2" \
  test "$("$LOOM" config show configs/walk.yaml | grep -cx '  preset: tiny-gpt2')" = 1

step "2. a -m multirun over two lrs"
run_loom train -m configs/walk.yaml training.lr=1e-3,3e-3 run.name=mr --quiet
expect_rc "multirun" 0
expect_out "multirun: 2 runs" "multirun: 2 runs; sweep directory"
check "multirun: two registry rows under sweep 'multirun', one per lr" \
  test "$(rows --sweep multirun --show training.lr,status --sort-by training.lr | tr '\n' ' ')" = "0.001,finished 0.003,finished "

step "3. a grid sweep and a random sweep"
cat > sweeps/grid.yaml <<'YAML'
name: wgrid
base: ../configs/walk.yaml
parameters:
  training.lr: {values: [2e-3, 5e-3]}
strategy: grid
YAML
cat > sweeps/random.yaml <<'YAML'
name: wrandom
base: ../configs/walk.yaml
parameters:
  training.lr: {min: 1e-4, max: 1e-2, distribution: log_uniform}
strategy: random
num_runs: 2
seed: 7
YAML
run_loom sweep run sweeps/grid.yaml
expect_rc "grid sweep" 0
check "grid: 2 finished runs with lr 2e-3 and 5e-3" \
  test "$(rows --sweep wgrid --show training.lr,status --sort-by training.lr | tr '\n' ' ')" = "0.002,finished 0.005,finished "
run_loom sweep show sweeps/random.yaml
expect_rc "random sweep: show" 0
drawn=$(echo "$RUN_OUT" | grep -o 'training.lr=[^ ]*' | cut -d= -f2 | sort -g | tr '\n' ' ')
run_loom sweep run sweeps/random.yaml
expect_rc "random sweep: run" 0
got=$(rows --sweep wrandom --show training.lr --sort-by training.lr | tr '\n' ' ')
check "random: 2 runs, lrs drawn in [1e-4, 1e-2] (registry: $got)" \
  awk -v s="$got" 'BEGIN { n = split(s, v, " "); ok = n == 2 && v[1] != v[2]; for (i = 1; i <= n; i++) ok = ok && v[i] >= 1e-4 && v[i] <= 1e-2; exit !ok }'
check "random: the runs' lrs are the points 'sweep show' printed ($drawn)" \
  $PY -c 'import sys; a = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]; sys.exit(not (len(a) == 2 and all(abs(x - y) <= 1e-9 * y for x, y in zip(a, b))))' "$drawn" "$got"

step "4. a run killed with SIGKILL mid-training"
LOOM_HEARTBEAT_INTERVAL=0.1 "$LOOM" train configs/walk.yaml run.name=victim training.steps=1000 \
  checkpoint.every=5 checkpoint.keep_last=2 --quiet > victim.out 2>&1 &
VICTIM=$!
PIDS+=($VICTIM)
VDIR=
for _ in $(seq 400); do
  [ -z "$VDIR" ] && VDIR=$(dir_of victim 2>/dev/null)
  # a complete checkpoint (keep_last prunes the old ones) and a few steps logged after it
  [ -n "$VDIR" ] && compgen -G "$VDIR/checkpoint_*/COMPLETE" >/dev/null &&
    [ "$(grep -c '"loss"' "$VDIR/metrics.jsonl" 2>/dev/null)" -ge 12 ] && break
  sleep 0.02
done
kill -9 "$VICTIM"
wait "$VICTIM" 2>/dev/null
logged=$(grep -c '"loss"' "$VDIR/metrics.jsonl")
check "the victim was killed mid-training ($logged of 1000 steps logged)" test "$logged" -ge 12 -a "$logged" -lt 1000
check "registry: the killed run is crashed" test "$(field victim status)" = crashed
check "registry: its progress is kept: steps = the $logged steps of metrics.jsonl" test "$(field victim steps)" = "$logged"
check "registry: its last loss = metrics.jsonl's last" \
  $PY -c 'import json, sys; last = [json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l][-1]["loss"]; sys.exit(float(sys.argv[2]) != last)' \
  "$VDIR/metrics.jsonl" "$(field victim final_loss)"
VID=$(id_of victim)

step "5. resumed with its own config: the same run continues"
run_loom train --resume "$VDIR" --quiet
expect_rc "resume the killed run" 0
check "resume: still one run named victim, the same id" test "$(rows --filter "name = 'victim'" --show run_id)" = "$VID"
check "resume: finished with all 1000 steps" test "$(field victim status),$(field victim steps)" = "finished,1000"
check "resume: metrics.jsonl holds steps 1..1000, each once" \
  $PY -c 'import json, sys; s = [json.loads(l)["step"] for l in open(sys.argv[1]) if "\"loss\"" in l]; sys.exit(s != list(range(1, 1001)))' "$VDIR/metrics.jsonl"
# the same config never interrupted: the killed-and-resumed losses are its losses, bit for bit
# (the printed decimals of the doubles compared as text)
run_loom train configs/walk.yaml run.name=reference training.steps=1000 --quiet
expect_rc "an uninterrupted run of the victim's config" 0
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1/metrics.jsonl"; }
check "resume: the 1000 losses equal the uninterrupted run's, bit for bit" \
  test "$(losses "$VDIR" | wc -l)" = 1000 -a "$(losses "$VDIR")" = "$(losses "$(dir_of reference)")"

step "6. a fork: resumed with a changed key"
before=$(tree_state "$VDIR")
run_loom train --resume "$VDIR" training.steps=1010 --quiet
expect_rc "resume with training.steps=1010" 0
fork=$(rows --filter "parent_id = '$VID'" --show run_id)
check "fork: a new run id recording its parent ($fork)" test -n "$fork" -a "$fork" != "$VID"
check "fork: exactly one child" test "$(echo "$fork" | grep -c .)" = 1
check "fork: the parent's directory is untouched, byte for byte" test "$(tree_state "$VDIR")" = "$before"
check "fork: the parent is still finished at 1000 steps" test "$(rows --filter "run_id = '$VID'" --show status,steps)" = "finished,1000"
check "fork: the child finished at step 1010" test "$(rows --filter "run_id = '$fork'" --show status,steps)" = "finished,1010"
FDIR=$(rows --filter "run_id = '$fork'" --show run_dir)
check "fork: the child's metrics.jsonl holds steps 1001..1010" \
  $PY -c 'import json, sys; s = [json.loads(l)["step"] for l in open(sys.argv[1]) if "\"loss\"" in l]; sys.exit(s != list(range(1001, 1011)))' "$FDIR/metrics.jsonl"
check "fork: the child's config.yaml records its parent" grep -qx "  parent: $VID" "$FDIR/config.yaml"

step "7. loom runs: filters, sort, show, hide, limit; show"
"$LOOM" runs --format json --all-columns > all.json
# the rule, applied by Python to every run: lr >= 2e-3 AND finished, by lr descending, then name
want=$($PY -c 'import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r.get("training.lr") is not None and r["training.lr"] >= 2e-3 and r["status"] == "finished"]
rows.sort(key=lambda r: -r["training.lr"])
print(" ".join("%s,%s" % (r["name"], r["training.lr"]) for r in rows))' all.json)
got=$(rows --filter "training.lr >= 2e-3" --filter "status = 'finished'" --sort-by training.lr --descending --show name,training.lr |
  $PY -c 'import sys; print(" ".join("%s,%s" % (l.split(",")[0], float(l.split(",")[1])) for l in sys.stdin.read().split()))')
check "two --filter (AND) + --sort-by --descending + --show = Python over the JSON ($want)" test "$got" = "$want"
check "the filter keeps at least the grid's 2e-3, 5e-3 and the multirun's 3e-3" test "$(echo "$want" | wc -w)" -ge 3
check "--limit 2: the first two" test "$(rows --filter "training.lr >= 2e-3" --filter "status = 'finished'" --sort-by training.lr --descending --show name,training.lr --limit 2 | wc -l)" = 2
run_loom runs --format csv --show run_id,name,status,steps --hide status --limit 1
check "--show then --hide: exactly run_id,name,steps" test "$(echo "$RUN_OUT" | head -1)" = "run_id,name,steps"
run_loom runs show "$VID"
expect_rc "runs show the victim" 0
expect_out "runs show: its id" "$VID"

step "8. loom runs diff: TP vs DP (same), two lrs (different)"
run_loom train configs/walk.yaml run.name=tp2 parallel.tp=2 --nproc 2 --quiet
expect_rc "train tp=2 on 2 ranks" 0
run_loom train configs/walk.yaml run.name=dp2 parallel.dp=2 training.micro_batch_size=1 --nproc 2 --quiet
expect_rc "train dp=2 on 2 ranks (same global batch)" 0
run_loom runs diff tp2 dp2
expect_rc "runs diff tp2 dp2: same (exit 0)" 0
expect_out "runs diff tp2 dp2: says SAME" "result: SAME"
lrs=($(rows --sweep multirun --show run_id --sort-by training.lr))
run_loom runs diff "${lrs[0]}" "${lrs[1]}"
expect_rc "runs diff of lr 1e-3 and 3e-3: different (exit 1)" 1
expect_out "runs diff of two lrs: the first step beyond" "first step beyond"

step "9. the dashboard in headless Chromium"
if ! command -v chromium >/dev/null || ! $PY -c 'import websocket' 2>/dev/null; then
  fail "chromium or python3-websocket is missing (Debian packages chromium, python3-websocket)"
else
  "$LOOM" runs serve --port 0 --sweeps-dir logs > serve.out 2> serve.err &
  SERVER=$!
  PIDS+=($SERVER)
  for _ in $(seq 100); do grep -q "^loom runs serve: http://" serve.out && break; sleep 0.1; done
  URL=$(sed -n 's|^loom runs serve: \(http://127\.0\.0\.1:[0-9]*/\) .*|\1|p' serve.out)
  check "serve prints its loopback URL" test -n "$URL"
  timeout 120 $PY "$HERE/walkthrough_dashboard.py" --url "$URL" --loom "$LOOM" --runs-dir runs \
    --run "$(id_of grouped)" --screenshot "$SHOT" > page.out 2>&1
  check "dashboard in Chromium (see below)" test $? = 0
  sed 's/^/  /' page.out
  kill -TERM "$SERVER"
  wait "$SERVER"
  check "serve stops on SIGTERM with exit 0" test $? = 0
fi
echo "walk-through took $((SECONDS - START)) s"
finish
