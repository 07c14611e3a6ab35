#!/usr/bin/python3
"""The dashboard's metrics and layout in headless Chromium at 1400 px wide (the DevTools driver of
dashboard_check.py), against the CLI and the run files:
  - nothing ticked: every run in the table is plotted (the loss chart has one curve per row, the
    points of each run's metrics.jsonl);
  - the metric picker lists the numeric fields of the plotted runs' metrics.jsonl: lr, grad_norm,
    tokens_per_s, step_time, val_loss (a run with validation), aux_loss (an MoE run) among them;
    ticking lr draws an lr chart with exactly the (step, lr) points of every run; unticking
    removes it; the choice is kept in the URL;
  - the metric columns (final_loss, final_valid_loss) are in sight at 1400 px: their headers lie
    inside the table's visible box without scrolling;
  - a loading state while curves arrive (the network slowed to 800 ms a request);
  - the sweep written under ./logs is listed without --sweeps-dir;
  - no console errors.
usage: dashboard_metrics_check.py --url URL --loom BIN --runs-dir DIR --val-run ID --moe-run ID
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_check import FAILED, Browser, check, loom_json  # noqa: E402


def columns(run_dir, keys):
    cols = {k: [] for k in keys}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            for k in keys:
                cols[k].append(o.get(k))
    return cols


def points(run_dir, key):
    c = columns(run_dir, ("step", key))
    return [(float(x), float(y)) for x, y in zip(c["step"], c[key]) if x is not None and y is not None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--loom", required=True)
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--val-run", required=True)
    ap.add_argument("--moe-run", required=True)
    a = ap.parse_args()
    assert re.match(r"^http://(127\.0\.0\.1|\[::1\]):\d+/$", a.url), "loopback URLs only"
    rows = loom_json(a.loom, a.runs_dir, "--show", "run_id,run_dir")
    run_dir = {r["run_id"]: r["run_dir"] for r in rows}
    ids = [r["run_id"] for r in loom_json(a.loom, a.runs_dir)]
    b = Browser(width=1400, height=900)
    try:
        b.call("Page.navigate", url=a.url)
        if not b.wait("!!(window.loomDashboard && window.loomDashboard.ready)", 30, "page ready"):
            return 1
        check("the table has the %d rows of `loom runs`" % len(ids), b.js("loomDashboard.rowCount()") == len(ids))

        # nothing ticked: the runs in the table are plotted
        b.wait("(loomDashboard.plotted('loss') || []).length === %d" % len(ids), 15, "every run's loss curve")
        plotted = b.js("loomDashboard.plotted('loss')") or []
        bad = [s["id"] for s in plotted if list(zip(s["x"], s["y"])) != points(run_dir[s["id"]], "loss")]
        check("nothing ticked: the %d runs in the table plotted, each with its metrics.jsonl's (step, loss)" % len(ids),
              sorted(s["id"] for s in plotted) == sorted(ids) and not bad, "ids %s, wrong %s" % ([s["id"] for s in plotted], bad))
        check("no box is ticked for that", b.js("document.querySelectorAll('#runs tbody input:checked').length") == 0)

        # the metric picker: every numeric field the runs logged
        offered = b.js("loomDashboard.offered()") or []
        for key in ("loss", "lr", "grad_norm", "tokens_per_s", "step_time", "val_loss", "aux_loss"):
            check("the metric picker lists %s" % key, key in offered, str(offered))
        check("the picker does not offer the x axes", "step" not in offered and "tokens" not in offered, str(offered))
        check("lr is not charted before it is ticked", b.js("loomDashboard.plotted('lr')") is None)
        b.js("document.querySelector('#metric-picker input[data-metric=\"lr\"]').click()")
        b.wait("(loomDashboard.plotted('lr') || []).length === %d" % len(ids), 10, "lr chart drawn")
        got = {s["id"]: list(zip(s["x"], s["y"])) for s in b.js("loomDashboard.plotted('lr')") or []}
        bad = [i for i in ids if got.get(i) != points(run_dir[i], "lr") or not got.get(i)]
        check("ticking lr draws the (step, lr) points of every run's metrics.jsonl", not bad, "wrong for %s" % bad)
        check("the lr chart comes after the default ones",
              b.js("[...document.querySelectorAll('#charts .chart')].length") >= 3)
        check("the URL keeps the metrics charted", "metrics=" in b.js("location.hash") and "lr" in b.js("location.hash"))
        b.js("document.querySelector('#metric-picker input[data-metric=\"aux_loss\"]').click()")
        b.wait("(loomDashboard.plotted('aux_loss') || []).length === 1", 10, "aux_loss chart drawn")
        got = b.js("loomDashboard.plotted('aux_loss')") or [{}]
        check("aux_loss: the MoE run's (step, aux_loss) points",
              got[0].get("id") == a.moe_run and list(zip(got[0]["x"], got[0]["y"])) == points(run_dir[a.moe_run], "aux_loss"))
        b.js("document.querySelector('#metric-picker input[data-metric=\"lr\"]').click()")
        check("unticking lr removes its chart", b.js("loomDashboard.plotted('lr')") is None)

        # ticking a run plots only it; unticking it plots the table's runs again
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.val_run)
        b.wait("(loomDashboard.plotted('loss') || []).length === 1", 10, "one ticked run")
        check("ticking a run plots only that run", [s["id"] for s in b.js("loomDashboard.plotted('loss')")] == [a.val_run])
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.val_run)
        b.wait("(loomDashboard.plotted('loss') || []).length === %d" % len(ids), 10, "all runs again")

        # the metric columns in sight at 1400 px
        box = b.js("(() => { const w = document.querySelector('#runs-panel .table-wrap').getBoundingClientRect();"
                   " return {left: w.left, right: w.right, width: window.innerWidth}; })()")
        for col in ("final_loss", "final_valid_loss"):
            r = b.js("(() => { const h = [...document.querySelectorAll('#runs thead th')].find(t => t.firstChild.textContent === %s);"
                     " if (!h) return null; const r = h.getBoundingClientRect(); return {left: r.left, right: r.right}; })()" % json.dumps(col))
            check("%s column in sight at %d px (header %s, table box %.0f..%.0f)" % (col, box["width"], r, box["left"], box["right"]),
                  r is not None and box["left"] <= r["left"] and r["right"] <= box["right"] + 0.5)

        # a loading state while curves arrive: every request slowed down
        b.call("Network.enable")
        b.call("Network.emulateNetworkConditions", offline=False, latency=800, downloadThroughput=-1, uploadThroughput=-1)
        b.js("loomDashboard.state.metrics = {}; document.querySelector('input[data-run=\"%s\"]').click()" % a.moe_run)
        b.wait("loomDashboard.loading()", 5, "loading while the curve is fetched")
        check("'loading curves' shown while data arrives",
              b.js("!document.getElementById('curves-loading').hidden") is True)
        b.wait("!loomDashboard.loading() && (loomDashboard.plotted('loss') || []).length === 1", 15, "curve arrived")
        check("the loading note goes when the data is there", b.js("document.getElementById('curves-loading').hidden") is True)
        b.call("Network.emulateNetworkConditions", offline=False, latency=0, downloadThroughput=-1, uploadThroughput=-1)

        # sweeps under ./logs, found without --sweeps-dir
        b.wait("document.querySelectorAll('#sweeps tbody tr').length > 0", 15, "sweeps listed")
        names = b.js("[...document.querySelectorAll('#sweeps tbody tr')].map(r => r.cells[1].textContent)")
        check("the sweep under ./logs is listed (no --sweeps-dir)", "logsgrid" in (names or []), str(names))
        b.pump(1.0)
        check("no console errors or exceptions", not b.errors, "; ".join(b.errors))
    finally:
        b.close()
    print("dashboard_metrics_check: %d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
