#!/usr/bin/env bash
# `loom runs serve` end to end: a registry made by real tiny runs (three lrs, a 2-point grid
# sweep whose log dir sits under the runs dir, a run with a Chrome trace, a long run left
# running in the background), the server on a free loopback port, then
#   - the JSON API against the CLI: rows of a filter and a sort equal `loom runs --format json`,
#     a bad filter answers 400 with the parser's message (the CLI's), metrics equal
#     metrics.jsonl and a cut last line is tolerated, config diff, sweep summary, trace file;
#   - CLI errors: port in use, registry missing, bad host/port/--sweeps-dir, exit codes; --db
#     on IPv6 loopback and the registry deleted under the server (500); SIGTERM stops it;
#   - the page in headless Chromium (dashboard_check.py): no console errors, row counts, the
#     plotted points, a growing running curve, config diff, bad filter; a screenshot saved.
# usage: serve_test.sh path/to/loom SCREENSHOT.png
. "$(dirname "$0")/../experiments.sh"
SHOT=${2:?usage: $0 loom screenshot.png}
HERE=$(cd "$(dirname "$0")" && pwd)
RUNS=$WORK/runs
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
make_data || { echo "could not make test data"; exit 1; }
command -v chromium >/dev/null || { echo "chromium is missing (Debian package chromium; make deps)"; exit 1; }
/usr/bin/python3 -c 'import websocket' 2>/dev/null || { echo "python3-websocket is missing (make deps)"; exit 1; }

# ---- runs and a sweep -----------------------------------------------------------------------
for lr in 1e-3 3e-4 1e-2; do
  "$LOOM" train "$WORK/base.yaml" training.lr=$lr run.name=lr$lr > "$WORK/train_$lr.out" 2>&1
  check "train lr $lr" test $? = 0
done
cat > "$WORK/grid.yaml" <<'YAML'
name: lrgrid
base: base.yaml
parameters:
  training.lr: {values: [2e-3, 5e-3]}
strategy: grid
YAML
(cd "$WORK" && "$LOOM" sweep run grid.yaml --log-dir "$RUNS/sweeps" > "$WORK/sweep.out" 2>&1)
check "grid sweep runs" test $? = 0
SWEEP=$(basename "$(ls -d "$RUNS"/sweeps/sweep_*)")
# the simulator's Chrome trace of the base config, kept with the sweep
"$LOOM" sim "$WORK/base.yaml" --hardware h100-sxm --trace "$RUNS/sweeps/$SWEEP/sim_trace.json" > "$WORK/sim.out" 2>&1
check "loom sim writes a trace" test -s "$RUNS/sweeps/$SWEEP/sim_trace.json"
"$LOOM" train "$WORK/base.yaml" run.name=traced --trace "$WORK/trace.json" > "$WORK/traced.out" 2>&1
check "traced run" test $? = 0
id_of() { "$LOOM" runs --runs-dir "$RUNS" --filter "name = '$1'" --show run_id --format csv | tail -n 1; }
dir_of() { "$LOOM" runs --runs-dir "$RUNS" --filter "name = '$1'" --show run_dir --format csv | tail -n 1; }
TRACED=$(id_of traced)
cp "$WORK/trace.json" "$(dir_of traced)/trace.json"
# a run that keeps running while the page watches it (killed at exit)
"$LOOM" train "$WORK/base.yaml" run.name=long training.steps=100000000 > "$WORK/long.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -n "$(id_of long)" ] && [ -s "$(dir_of long)/metrics.jsonl" ] && break; sleep 0.1; done
LONG=$(id_of long)
check "long run registered and logging" test -s "$(dir_of long)/metrics.jsonl"

# ---- the server ------------------------------------------------------------------------------
VIEW_ARGS=(--filter "training.lr >= 1e-3" --sort-by training.lr --descending --show run_id,name training.lr --limit 3)
"$LOOM" runs serve --runs-dir "$RUNS" --port 0 "${VIEW_ARGS[@]}" > "$WORK/serve.out" 2> "$WORK/serve.err" &
SERVER=$!
PIDS+=($SERVER)
for _ in $(seq 100); do grep -q "^loom runs serve: http://" "$WORK/serve.out" && break; sleep 0.1; done
URL=$(sed -n 's|^loom runs serve: \(http://127\.0\.0\.1:[0-9]*/\) .*|\1|p' "$WORK/serve.out")
PORT=$(echo "$URL" | sed 's|.*:\([0-9]*\)/|\1|')
check "serve prints its loopback URL" test -n "$URL"
VIEW_URL=$(sed -n 's|^  the view of this command line: \(http://127\.0\.0\.1:[0-9]*/#.*\)$|\1|p' "$WORK/serve.out")
check "serve prints the link of its list options' view" test "$VIEW_URL" = \
  "${URL}#filter=training.lr%20%3E%3D%201e-3&sort=training.lr&desc=1&show=run_id%2Cname%2Ctraining.lr&limit=3"
[ -n "$URL" ] || { cat "$WORK/serve.err"; finish; exit 1; }
http() { /usr/bin/python3 "$HERE/http_get.py" "$@"; } # URL OUT [--method M] [--host H] -> status
get() { http "$URL$1" "$WORK/body"; }
jq_py() { /usr/bin/python3 -c "import json, sys; d = json.load(open('$WORK/body')); print($1)"; }

check "page served" test "$(get '')" = 200
check "page is the dashboard" grep -q "<title>loom runs</title>" "$WORK/body"
check "chart.js embedded" test "$(get chart.js)" = 200
check "unknown file is 404" test "$(get nothing.js)" = 404
check "a Host that is a name (DNS rebinding) is refused (403)" test "$(http "${URL}api/runs" /dev/null --host evil.example:80)" = 403
check "Host localhost is served" test "$(http "${URL}api/runs" /dev/null --host "localhost:$PORT")" = 200
check "POST is refused (405)" test "$(http "${URL}api/runs" /dev/null --method POST)" = 405

FILTER="training.lr >= 1e-3 AND status = 'finished'"
Q=$(/usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$FILTER")
check "runs with a filter: 200" test "$(get "api/runs?filter=$Q&sort=training.lr&desc=1")" = 200
API_IDS=$(jq_py "' '.join(d['run_ids'])")
CLI_IDS=$("$LOOM" runs --runs-dir "$RUNS" --filter "$FILTER" --sort-by training.lr --descending --format json |
  /usr/bin/python3 -c 'import json, sys; print(" ".join(r["run_id"] for r in json.load(sys.stdin)))')
check "filter + sort: the CLI's runs in the CLI's order ($CLI_IDS)" test "$API_IDS" = "$CLI_IDS"
check "filter keeps 4 of the 7 runs (lr 1e-3, 1e-2, 2e-3, 5e-3)" test "$(echo $API_IDS | wc -w)" = 4
check "show: exactly the named columns" test "$(get "api/runs?show=run_id,training.lr&hide=run_id")" = 200
check "show/hide columns" test "$(jq_py "[c['name'] for c in d['columns']]")" = "['training.lr']"

BAD="training.lr >> 1"
QB=$(/usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$BAD")
check "bad filter: 400" test "$(get "api/runs?filter=$QB")" = 400
MSG=$(jq_py "d['error']")
"$LOOM" runs --runs-dir "$RUNS" --filter "$BAD" > /dev/null 2> "$WORK/bad.err"
check "bad filter: the CLI exits non-zero" test $? != 0
check "bad filter: the message is the parser's, as the CLI prints it" grep -qF -- "$(echo "$MSG" | head -n 1)" "$WORK/bad.err"
check "bad filter: message says where" grep -q "column" <<< "$MSG"
check "unknown sort column: 400" test "$(get "api/runs?sort=no.such")" = 400
check "bad limit: 400" test "$(get "api/runs?limit=x")" = 400

# metrics: every line of metrics.jsonl, then a cut last line is left out and reported
LR3=$(id_of lr3e-4) D3=$(dir_of lr3e-4)
check "metrics: 200" test "$(get "api/metrics?run=$LR3")" = 200
check "metrics: loss column = metrics.jsonl, exactly" test "$(jq_py "d['fields']['loss']")" = \
  "$(/usr/bin/python3 -c "import json; print([float(json.loads(l)['loss']) for l in open('$D3/metrics.jsonl')])")"
printf '{"step": 7, "loss": 5.1' >> "$D3/metrics.jsonl"
check "metrics with a cut last line: 200" test "$(get "api/metrics?run=$LR3")" = 200
check "cut last line left out: 6 lines" test "$(jq_py "d['lines']")" = 6
check "cut last line reported" test "$(jq_py "d['partial_last_line']")" = True
# the writer completes the line, with a validation loss: now 7 lines, val_loss on the last only
printf ', "val_loss": 5.4, "tokens": 224}\n' >> "$D3/metrics.jsonl"
get "api/metrics?run=$LR3" > /dev/null
check "completed line: 7 lines, none partial" test "$(jq_py "(d['lines'], d['partial_last_line'])")" = "(7, False)"
check "val_loss column: null on the 6 lines without it, 5.4 on the 7th" test "$(jq_py "d['fields']['val_loss']")" = \
  "[None, None, None, None, None, None, 5.4]"
check "unknown run: 404" test "$(get "api/metrics?run=nope")" = 404
check "unknown run: says so" grep -q "nope" "$WORK/body"

# config diff of two runs: the keys `loom runs compare` lists
check "diff: 200" test "$(get "api/diff?a=lr1e-3&b=lr1e-2")" = 200
check "diff: run.name and training.lr differ" test "$(jq_py "[(x['key'], x['a'], x['b']) for x in d['differ']]")" = \
  "[('run.name', 'lr1e-3', 'lr1e-2'), ('training.lr', 0.001, 0.01)]"

# sweeps
check "sweeps: 200" test "$(get api/sweeps)" = 200
check "sweeps: the grid's execution, 2 SUCCESS" test "$(jq_py "[(s['id'], s['sweep'], s['points'], s['by_status']) for s in d['sweeps']]")" = \
  "[('$SWEEP', 'lrgrid', 2, {'SUCCESS': 2})]"
check "sweep: 200" test "$(get "api/sweep?dir=$SWEEP")" = 200
check "sweep: summary.csv rows = the file's" test "$(jq_py "len(d['summary_csv']['rows'])")" = \
  "$(($(wc -l < "$RUNS/sweeps/$SWEEP/summary.csv") - 1))"
check "sweep: final_loss column as in summary.csv" test "$(jq_py "[r[d['summary_csv']['columns'].index('final_loss')] for r in d['summary_csv']['rows']]")" = \
  "$(/usr/bin/python3 -c "import csv; print([r['final_loss'] for r in csv.DictReader(open('$RUNS/sweeps/$SWEEP/summary.csv'))])")"
check "sweep: its 2 registered runs" test "$(jq_py "sorted(d['run_ids'])")" = \
  "$("$LOOM" runs --runs-dir "$RUNS" --sweep lrgrid --format json | /usr/bin/python3 -c 'import json, sys; print(sorted(r["run_id"] for r in json.load(sys.stdin)))')"
check "unknown sweep: 404" test "$(get "api/sweep?dir=../..")" = 404
check "sweep lists the simulator's trace" test "$(get "api/sweep?dir=$SWEEP")$(jq_py "d['traces']")" = "200['sim_trace.json']"
check "sweep trace download: 200" test "$(get "api/trace?sweep=$SWEEP&file=sim_trace.json")" = 200
check "sweep trace download: the simulator's bytes" cmp -s "$WORK/body" "$RUNS/sweeps/$SWEEP/sim_trace.json"

# the trace of a run
check "run detail: 200" test "$(get "api/run?id=$TRACED")" = 200
check "run detail lists trace.json" test "$(jq_py "d['traces']")" = "['trace.json']"
check "trace download: 200" test "$(get "api/trace?run=$TRACED&file=trace.json")" = 200
check "trace download: the file's bytes" cmp -s "$WORK/body" "$WORK/trace.json"
check "a file that is not a trace: 404" test "$(get "api/trace?run=$TRACED&file=metrics.jsonl")" = 404
check "no path escapes: 404" test "$(get "api/trace?run=$TRACED&file=../registry.db")" = 404

# ---- CLI errors ------------------------------------------------------------------------------
"$LOOM" runs serve --runs-dir "$RUNS" --port "$PORT" > /dev/null 2> "$WORK/inuse.err"
check "port in use: exit 1" test $? = 1
check "port in use: says so" grep -q "port $PORT on 127.0.0.1 is already in use" "$WORK/inuse.err"
"$LOOM" runs serve --runs-dir "$WORK/none" --port 0 > /dev/null 2> "$WORK/noreg.err"
check "registry missing: exit 1" test $? = 1
check "registry missing: says where" grep -q "no run registry at '$WORK/none/registry.db'" "$WORK/noreg.err"
"$LOOM" runs serve --runs-dir "$RUNS" --host nowhere.example > /dev/null 2> "$WORK/host.err"
check "bad host: exit 1" test $? = 1
check "bad host: says so" grep -q "is not an IPv4 or IPv6 address" "$WORK/host.err"
"$LOOM" runs serve --runs-dir "$RUNS" --sweeps-dir "$WORK/nodir" > /dev/null 2> "$WORK/sd.err"
check "--sweeps-dir not a directory: exit 1" test $? = 1
check "--sweeps-dir not a directory: says so" grep -q "sweeps-dir '$WORK/nodir' is not a directory" "$WORK/sd.err"
# --db on a copy of the registry, on IPv6 loopback; the file deleted under the server: 500
/usr/bin/python3 -c "import sqlite3, sys; s = sqlite3.connect(sys.argv[1]); d = sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" \
  "$RUNS/registry.db" "$WORK/copy.db"
"$LOOM" runs serve --db "$WORK/copy.db" --host ::1 --port 0 > "$WORK/v6.out" 2>&1 &
V6=$!
PIDS+=($V6)
for _ in $(seq 100); do grep -q "^loom runs serve: http://" "$WORK/v6.out" && break; sleep 0.1; done
V6URL=$(sed -n 's|^loom runs serve: \(http://\[::1\]:[0-9]*/\) .*|\1|p' "$WORK/v6.out")
check "--host ::1: an IPv6 loopback URL" test -n "$V6URL"
code=$(http "${V6URL}api/runs" "$WORK/body")
check "--db copy over IPv6: 200 and every run" test "$code:$(jq_py "d['count']")" = "200:$("$LOOM" runs --db "$WORK/copy.db" --format json | /usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')"
rm -f "$WORK"/copy.db*
code=$(http "${V6URL}api/runs" "$WORK/body")
check "registry deleted while serving: 500 saying so" test "$code:$(jq_py "'is gone' in d['error']")" = "500:True"
kill -TERM $V6
check "--host ::1: no exposure warning" test -z "$(grep 'exposes the registry' "$WORK/v6.out")"
# any other address: said on stderr that the registry is exposed
"$LOOM" runs serve --runs-dir "$RUNS" --host 0.0.0.0 --port 0 > "$WORK/any.out" 2> "$WORK/any.err" &
ANY=$!
PIDS+=($ANY)
for _ in $(seq 100); do grep -q "^loom runs serve: http://" "$WORK/any.out" && break; sleep 0.1; done
check "--host 0.0.0.0: warns that it exposes the registry" \
  grep -q "warning: listening on 0.0.0.0 exposes the registry" "$WORK/any.err"
kill -TERM $ANY
"$LOOM" runs serve --runs-dir "$RUNS" --port 0 --filter "training.lr >> 1" > /dev/null 2> "$WORK/bf.err"
check "serve --filter with a bad filter: exit 1 before serving" test $? = 1
check "serve --filter with a bad filter: the parser's message" grep -q "loom runs serve: --filter: column 14: expected a value" "$WORK/bf.err"
"$LOOM" runs serve --runs-dir "$RUNS" --port 70000 > /dev/null 2> "$WORK/port.err"
check "bad port: exit 2" test $? = 2
check "bad port: says so" grep -q "port takes a number 0..65535" "$WORK/port.err"

# ---- the page in headless Chromium -----------------------------------------------------------
mkdir -p "$(dirname "$SHOT")"
timeout 150 /usr/bin/python3 "$HERE/dashboard_check.py" --url "$URL" --loom "$LOOM" --runs-dir "$RUNS" \
  --finished "$(id_of lr1e-2)" --running "$LONG" --diff "$(id_of lr1e-3)" "$(id_of lr1e-2)" \
  --filter "training.lr >= 1e-3" --traced "$TRACED" --val-run "$LR3" --screenshot "$SHOT" \
  --view-url "$VIEW_URL" --view-args "$(/usr/bin/python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${VIEW_ARGS[@]}")" > "$WORK/page.out" 2>&1
check "dashboard in Chromium (see below)" test $? = 0
cat "$WORK/page.out"

# ---- SIGTERM stops the server cleanly --------------------------------------------------------
kill -TERM "$SERVER"
for _ in $(seq 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
wait "$SERVER"
check "SIGTERM: exit 0" test $? = 0
check "SIGTERM: says stopped" grep -q "stopped (SIGTERM)" "$WORK/serve.out"
finish
