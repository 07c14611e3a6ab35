#!/usr/bin/python3
"""The dashboard step of tests/e2e/experiment_walkthrough_test.sh: opens the page `loom runs
serve` printed in headless Chromium (the DevTools driver of tests/runs/dashboard_check.py) and
checks what a user sees against the CLI and the run files:
  - the page becomes ready without console errors or uncaught exceptions;
  - the table has the rows of `loom runs --format json`, in the same order;
  - ticking a run draws its loss curve: exactly the (step, loss) points of its metrics.jsonl;
  - a screenshot is saved (more than 10 kB: a drawn page, not a blank one).
Prints one line per check; exit 1 on any failure.

usage: walkthrough_dashboard.py --url URL --loom BIN --runs-dir DIR --run ID --screenshot F.png
"""
import argparse
import base64
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runs"))
from dashboard_check import FAILED, Browser, check, loom_json, metrics_columns, pairs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--loom", required=True)
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--run", required=True, help="a finished run whose curve is checked")
    ap.add_argument("--screenshot", required=True)
    a = ap.parse_args()
    assert re.match(r"^http://(127\.0\.0\.1|\[::1\]):\d+/$", a.url), "loopback URLs only"
    b = Browser()
    try:
        b.call("Page.navigate", url=a.url)
        if not b.wait("!!(window.loomDashboard && window.loomDashboard.ready)", 30, "page ready"):
            return 1
        rows = loom_json(a.loom, a.runs_dir)
        want = [r["run_id"] for r in rows]
        got = b.js("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
        check("the table has the %d rows of `loom runs`, in its order" % len(want),
              got == want and b.js("loomDashboard.rowCount()") == len(want), "page %s vs cli %s" % (got, want))
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.run)
        b.wait("(loomDashboard.plotted('loss') || []).length === 1 && loomDashboard.plotted('loss')[0].x.length > 0",
               10, "loss curve drawn")
        p = b.js("loomDashboard.plotted('loss')")
        drawn = list(zip(p[0]["x"], p[0]["y"])) if p else []
        run_dir = {r["run_id"]: r["run_dir"] for r in loom_json(a.loom, a.runs_dir, "--show", "run_id,run_dir")}
        file_points = [(float(x), float(y)) for x, y in pairs(metrics_columns(run_dir[a.run]), "step", "loss")]
        check("loss curve of %s: the %d (step, loss) points of metrics.jsonl, exactly" % (a.run, len(file_points)),
              drawn == file_points and len(file_points) > 0, "drawn %s vs file %s" % (drawn[:3], file_points[:3]))
        b.pump(0.5)
        shot = b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        os.makedirs(os.path.dirname(os.path.abspath(a.screenshot)), exist_ok=True)
        with open(a.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        check("screenshot saved to " + a.screenshot, os.path.getsize(a.screenshot) > 10000)
        check("no console errors or exceptions", not b.errors, "; ".join(b.errors))
    finally:
        b.close()
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
