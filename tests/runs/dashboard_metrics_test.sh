#!/usr/bin/env bash
# The dashboard as people compare it with W&B and MLflow: every scalar of metrics.jsonl can be
# charted, the runs in view are plotted without ticking each, the metric columns are in sight at
# 1400 px, sweeps under ./logs (where `loom sweep run` writes) are found by default, the table is
# there in a screenshot taken at load, a loading state while data arrives. Runs: three dense ones
# (one with validation), an MoE one (aux_loss), a 2-point sweep run from this directory (its log
# directory in ./logs, nothing passed to the server about it); then
#   - `chromium --headless --screenshot` / `--dump-dom` with their default budget (no virtual
#     time) at 1400 x 900: the dumped page has every run's row; the screenshot is kept;
#   - dashboard_metrics_check.py over DevTools at 1400 px wide (see there).
# usage: dashboard_metrics_test.sh path/to/loom SCREENSHOT.png
. "$(dirname "$0")/../experiments.sh"
SHOT=${2:?usage: $0 loom screenshot.png}
HERE=$(cd "$(dirname "$0")" && pwd)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$WORK"; }
trap cleanup EXIT
make_data || { echo "could not make test data"; exit 1; }
command -v chromium >/dev/null || { echo "chromium is missing (Debian package chromium; make deps)"; exit 1; }
/usr/bin/python3 -c 'import websocket' 2>/dev/null || { echo "python3-websocket is missing (make deps)"; exit 1; }
cd "$WORK"

for lr in 1e-3 3e-3; do
  "$LOOM" train base.yaml training.lr=$lr run.name=lr$lr --quiet > /dev/null || fail "train lr $lr"
done
"$LOOM" train base.yaml run.name=val data.val_fraction=0.1 training.eval_every=2 training.eval_batches=1 \
  --quiet > /dev/null || fail "train with validation"
"$LOOM" train base.yaml run.name=moe model.preset=tiny-qwen3-moe model.hidden=32 model.heads=4 \
  model.kv_heads=2 model.layers=1 model.max_seq=32 --quiet > /dev/null || fail "train an MoE model"
cat > grid.yaml <<YAML
name: logsgrid
base: $WORK/base.yaml
parameters:
  training.warmup_steps: {values: [1, 2]}
strategy: grid
YAML
"$LOOM" sweep run grid.yaml > sweep.out 2>&1 || fail "sweep run"
check "the sweep wrote under ./logs" test -d "$(ls -d logs/sweep_* | head -1)"

"$LOOM" runs serve --runs-dir "$WORK/runs" --port 0 > serve.out 2> serve.err &
PIDS+=($!)
for _ in $(seq 100); do grep -q "^loom runs serve: http://" serve.out && break; sleep 0.1; done
URL=$(sed -n 's/^loom runs serve: \(http:[^ ]*\).*/\1/p' serve.out)
check "server up ($URL)" test -n "$URL"

# ---- a screenshot at load, Chromium's defaults: the table is in it ---------------------------
ids=$("$LOOM" runs --runs-dir "$WORK/runs" --format csv --show run_id | tail -n +2)
C=(chromium --headless=new --no-sandbox --disable-gpu --no-first-run --window-size=1400,900)
timeout 120 "${C[@]}" --user-data-dir="$WORK/chrome1" --dump-dom "$URL" > dom.html 2> chrome.err
check "chromium --dump-dom (default budget) ran" test -s dom.html
missing=0
for id in $ids; do grep -q "data-run=\"$id\"" dom.html || missing=$((missing + 1)); done
check "the page at load has the rows of all $(wc -w <<< "$ids") runs ($missing missing)" \
  test "$missing" = 0 -a "$(wc -w <<< "$ids")" -ge 6
check "... and no 'loading the runs' row left" bash -c "! grep -q 'loading the runs' dom.html"
rm -f "$SHOT"
(cd "$WORK" && timeout 120 "${C[@]}" --user-data-dir="$WORK/chrome2" --screenshot="$SHOT" "$URL" > /dev/null 2>> chrome.err)
check "chromium --screenshot (default budget) wrote $SHOT" test -s "$SHOT"
check "... a drawn page, not a blank one ($(stat -c %s "$SHOT" 2>/dev/null) bytes)" \
  test "$(stat -c %s "$SHOT" 2>/dev/null || echo 0)" -gt 20000

# ---- the page over DevTools ------------------------------------------------------------------
/usr/bin/python3 "$HERE/dashboard_metrics_check.py" --url "$URL" --loom "$LOOM" --runs-dir "$WORK/runs" \
  --val-run "$("$LOOM" runs --runs-dir "$WORK/runs" --filter "name = 'val'" --show run_id --format csv | tail -1)" \
  --moe-run "$("$LOOM" runs --runs-dir "$WORK/runs" --filter "name = 'moe'" --show run_id --format csv | tail -1)"
check "dashboard_metrics_check.py" test $? = 0
finish
