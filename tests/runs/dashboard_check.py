#!/usr/bin/python3
"""Drives the `loom runs serve` page in headless Chromium (Debian's chromium) over the DevTools
protocol (python3-websocket) and checks what a user sees against the CLI and the run files:

  - the page loads and runs without console errors or uncaught exceptions;
  - the table's rows equal `loom runs --format json` for the same filter, typed into the page
    (and for a sort and a --show column list);
  - the loss, grad_norm and val_loss points the charts drew for a ticked run equal its metrics.jsonl
    (bit for bit: the server sends 17 significant digits, JSON round-trips doubles), and the
    x = tokens view draws the tokens column;
  - the curve of a running run grows between two reads (the page polls every 2 s);
  - the config diff lists exactly the keys `loom runs compare` lists; a run's trace link
    downloads its trace file; drag-zoom, log y and smoothing keep the raw points;
  - a bad filter shows the parser's message (the server answers 400 with it);
  - a screenshot is saved.
Every wait is bounded; only loopback addresses are used. Prints one line per check; exit 1 on
any failure.

usage: dashboard_check.py --url URL --loom BIN --runs-dir DIR --finished ID --running ID
                          --diff ID ID --filter EXPR --traced ID --screenshot FILE.png
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket

FAILED = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + detail), flush=True)
    if not ok:
        FAILED.append(what)


class Browser:
    """One headless Chromium with one page, driven over the DevTools websocket."""

    def __init__(self, width=1440, height=1300):
        self.profile = tempfile.mkdtemp(prefix="loom-chromium-")
        self.log = open(os.path.join(self.profile, "stderr.txt"), "w+")
        exe = shutil.which("chromium") or "/usr/bin/chromium"
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--disable-sync",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height),
             "about:blank"], stdout=subprocess.DEVNULL, stderr=self.log)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.time() > deadline or self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError("chromium did not start: " + self.log.read()[-2000:])
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = []
        while not pages and time.time() < deadline:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=10) as r:
                pages = [t for t in json.load(r) if t["type"] == "page"]
            time.sleep(0.1)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.next_id = 0
        self.errors = []  # console errors, uncaught exceptions, failed loads
        for m in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(m)

    def _event(self, msg):
        m, p = msg.get("method"), msg.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
        elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            self.errors.append("console.%s: %s" % (p["type"], " ".join(str(a.get("value", a.get("description"))) for a in p["args"])))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append("log: %s %s" % (p["entry"]["text"], p["entry"].get("url", "")))

    def call(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        deadline = time.time() + 30
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            self._event(msg)
        raise RuntimeError(method + " got no answer in 30 s")

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("evaluating %s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def pump(self, seconds):
        """Receive events for a while (errors that arrive between calls)."""
        self.ws.settimeout(0.2)
        end = time.time() + seconds
        while time.time() < end:
            try:
                self._event(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
        self.ws.settimeout(30)

    def wait(self, expr, seconds, what):
        end = time.time() + seconds
        while time.time() < end:
            if self.js(expr):
                return True
            self.pump(0.2)
        check(what, False, "not true within %d s: %s" % (seconds, expr))
        return False

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


def loom_json(loom, runs_dir, *args):
    out = subprocess.run([loom, "runs", "--runs-dir", runs_dir, "--format", "json", *args],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def metrics_columns(run_dir, keys=("step", "tokens", "loss", "grad_norm")):
    """Columns of metrics.jsonl (None where a line lacks the key), read independently of the server."""
    cols = {k: [] for k in keys}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            for k in cols:
                cols[k].append(o.get(k))
    return cols


def pairs(cols, xk, yk):
    return [(x, y) for x, y in zip(cols[xk], cols[yk]) if x is not None and y is not None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--loom", required=True)
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--finished", required=True)
    ap.add_argument("--running", required=True)
    ap.add_argument("--diff", nargs=2, required=True)
    ap.add_argument("--filter", required=True)
    ap.add_argument("--traced", required=True, help="a run with a Chrome trace in its directory")
    ap.add_argument("--val-run", required=True, help="a run whose metrics.jsonl has val_loss lines")
    ap.add_argument("--view-url", required=True, help="the link `loom runs serve LIST-OPTIONS` printed")
    ap.add_argument("--view-args", required=True, help="those list options, a JSON array")
    ap.add_argument("--screenshot", required=True)
    a = ap.parse_args()
    assert re.match(r"^http://(127\.0\.0\.1|\[::1\]):\d+/$", a.url), "loopback URLs only"

    b = Browser()
    try:
        b.call("Page.navigate", url=a.url)
        if not b.wait("!!(window.loomDashboard && window.loomDashboard.ready)", 30, "page ready"):
            return 1
        everything = loom_json(a.loom, a.runs_dir)
        check("unfiltered table has the %d rows of `loom runs`" % len(everything),
              b.js("loomDashboard.rowCount()") == len(everything),
              "page %s" % b.js("loomDashboard.rowCount()"))

        # the filter, typed into the page and applied as a user would
        want = [r["run_id"] for r in loom_json(a.loom, a.runs_dir, "--filter", a.filter)]
        b.js("document.getElementById('filter').value = %s; document.getElementById('apply').click()" % json.dumps(a.filter))
        b.wait("loomDashboard.state.query.filter === %s && loomDashboard.state.table && "
               "loomDashboard.state.table.count === %d" % (json.dumps(a.filter), len(want)), 10, "filtered table arrives")
        got = b.js("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
        check("filter %r: %d rows, the runs `loom runs --filter` lists (in order)" % (a.filter, len(want)),
              got == want and len(want) > 0, "page %s vs cli %s" % (got, want))

        # sort by a column, descending, and narrow the columns with show
        want = [r["run_id"] for r in loom_json(a.loom, a.runs_dir, "--filter", a.filter, "--sort-by",
                                               "training.lr", "--descending")]
        b.js("document.getElementById('sort').value = 'training.lr'; document.getElementById('desc').checked = true;"
             "document.getElementById('show').value = 'run_id,training.lr,status'; document.getElementById('apply').click()")
        b.wait("loomDashboard.state.query.sort === 'training.lr' && document.querySelectorAll('#runs thead th').length === 4",
               10, "sorted table arrives")
        got = b.js("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
        check("sort by training.lr descending = `loom runs --sort-by training.lr --descending`", got == want,
              "page %s vs cli %s" % (got, want))
        heads = b.js("[...document.querySelectorAll('#runs thead th')].slice(1).map(h => h.firstChild.textContent.replace(/ [\\u25b4\\u25be]$/, ''))")
        check("--show run_id,training.lr,status: exactly those columns", heads == ["run_id", "training.lr", "status"], str(heads))

        # sweep menu, all columns, hide and limit together, against the CLI's JSON
        sweeps = b.js("[...document.getElementById('sweep').options].map(o => o.value).filter(Boolean)")
        check("the sweep menu lists the registry's sweeps", len(sweeps) > 0, str(sweeps))
        b.js("document.getElementById('sort').value = ''; document.getElementById('desc').checked = false;"
             "document.getElementById('filter').value = ''")
        if sweeps:
            cli = loom_json(a.loom, a.runs_dir, "--sweep", sweeps[0], "--all-columns", "--hide", "status",
                            "--limit", "1")
            b.js("document.getElementById('sweep').value = %s; document.getElementById('all').checked = true;"
                 "document.getElementById('show').value = ''; document.getElementById('hide').value = 'status';"
                 "document.getElementById('limit').value = '1'; document.getElementById('apply').click()" % json.dumps(sweeps[0]))
            b.wait("loomDashboard.state.query.limit === '1' && loomDashboard.state.table.count === 1", 10, "sweep query arrives")
            heads = b.js("[...document.querySelectorAll('#runs thead th')].slice(1).map(h => h.firstChild.textContent)")
            rows = b.js("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
            check("--sweep %s --all-columns --hide status --limit 1: the CLI's row and its %d columns" % (sweeps[0], len(cli[0])),
                  rows == [cli[0]["run_id"]] and heads == list(cli[0].keys()), "page %s %s" % (rows, heads[:5]))
            # the view lives in the URL: a reload shows the same query
            b.js("window.beforeReload = true")
            b.call("Page.reload")
            b.wait("!window.beforeReload && !!(window.loomDashboard && window.loomDashboard.ready)", 30, "page ready after reload")
            again = b.js("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
            check("reload keeps the view from the URL (sweep, limit, hide)", again == rows and
                  b.js("document.getElementById('hide').value") == "status", "%s" % again)
            b.js("document.getElementById('sweep').value = ''; document.getElementById('all').checked = false;"
                 "document.getElementById('hide').value = ''; document.getElementById('limit').value = '';"
                 "document.getElementById('apply').click()")
            b.wait("loomDashboard.rowCount() === %d" % len(everything), 10, "unfiltered table again")

        # clicking a column header sorts by it; a second click reverses
        want = [r["run_id"] for r in loom_json(a.loom, a.runs_dir, "--sort-by", "name")]
        b.js("[...document.querySelectorAll('#runs thead th')].find(h => h.firstChild.textContent === 'name').click()")
        b.wait("loomDashboard.state.query.sort === 'name' && !loomDashboard.state.query.desc", 10, "header sort")
        b.wait("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run).join() === %s" % json.dumps(",".join(want)),
               10, "header click sorts like --sort-by name")
        b.js("[...document.querySelectorAll('#runs thead th')].find(h => h.firstChild.textContent.startsWith('name')).click()")
        want = [r["run_id"] for r in loom_json(a.loom, a.runs_dir, "--sort-by", "name", "--descending")]
        ok = b.wait("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run).join() === %s" % json.dumps(",".join(want)),
                    10, "second header click sorts like --sort-by name --descending")
        check("column header clicks sort as --sort-by name [--descending]", ok)

        # back to every run, then tick one finished run and compare what the chart drew
        b.js("for (const id of ['filter','show']) document.getElementById(id).value = '';"
             "document.getElementById('sort').value = ''; document.getElementById('desc').checked = false;"
             "document.getElementById('apply').click()")
        b.wait("loomDashboard.rowCount() === %d" % len(everything), 10, "unfiltered table again")
        run_dir = {r["run_id"]: r for r in loom_json(a.loom, a.runs_dir, "--show", "run_id,run_dir")}
        fin = metrics_columns(run_dir[a.finished]["run_dir"])
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.finished)
        # (while nothing is ticked the table's runs are plotted: wait for the ticked run's own
        # curve, not any single one that loaded first)
        b.wait("(loomDashboard.plotted('loss') || []).length === 1 && loomDashboard.plotted('loss')[0].id === %s"
               " && loomDashboard.plotted('loss')[0].x.length > 0" % json.dumps(a.finished),
               10, "loss curve drawn")
        for key in ("loss", "grad_norm"):
            p = b.js("loomDashboard.plotted('%s')" % key)
            drawn = list(zip(p[0]["x"], p[0]["y"])) if p else []
            want = pairs(fin, "step", key)
            check("%s curve of %s: the %d (step, %s) points of metrics.jsonl, exactly" % (key, a.finished, len(want), key),
                  drawn == [(float(x), float(y)) for x, y in want] and len(want) > 0,
                  "drawn %s vs file %s" % (drawn[:4], want[:4]))
        # hovering at a step shows the run's value there (7 significant digits)
        mid = pairs(fin, "step", "loss")[len(pairs(fin, "step", "loss")) // 2]
        # (a mouse event on the canvas at the pixel of that step, computed in the same script so
        # that no layout change can move the chart in between)
        tip = b.js("(() => { const c = loomDashboard.chart('loss'), r = c.canvas.getBoundingClientRect();"
                   " c.canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + c.scale.sx(%r), clientY: r.top + r.height / 2}));"
                   " return c.tip.textContent; })()" % float(mid[0]))
        want = "%.7g" % mid[1]
        check("hover at step %s shows loss %s" % (mid[0], want),
              tip.startswith("step %s\n" % mid[0]) and tip.rstrip().endswith(": " + repr(float(want))), repr(tip))
        b.js("loomDashboard.chart('loss').canvas.dispatchEvent(new MouseEvent('mouseleave'))")

        b.js("{ const s = document.getElementById('xkey'); s.value = 'tokens'; s.dispatchEvent(new Event('change')) }")
        p = b.js("loomDashboard.plotted('loss')")
        want = pairs(fin, "tokens", "loss")
        check("x = tokens: the (tokens, loss) points of metrics.jsonl", p and list(zip(p[0]["x"], p[0]["y"])) ==
              [(float(x), float(y)) for x, y in want], "drawn %s" % (p and p[0]["x"][:4]))
        b.js("{ const s = document.getElementById('xkey'); s.value = 'step'; s.dispatchEvent(new Event('change')) }")

        # val_loss: its chart appears when a ticked run's lines carry one, with exactly those points
        check("no validation chart while no ticked run has val_loss", b.js("loomDashboard.plotted('val_loss')") is None)
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.val_run)
        b.wait("(loomDashboard.plotted('val_loss') || []).some(s => s.id === %s)" % json.dumps(a.val_run), 10, "val_loss chart")
        vcols = metrics_columns(run_dir[a.val_run]["run_dir"], ("step", "val_loss"))
        p = [s for s in (b.js("loomDashboard.plotted('val_loss')") or []) if s["id"] == a.val_run]
        want = [(float(x), float(y)) for x, y in pairs(vcols, "step", "val_loss")]
        check("val_loss chart: the %d (step, val_loss) points of metrics.jsonl" % len(want),
              p and list(zip(p[0]["x"], p[0]["y"])) == want and len(want) > 0, str(p)[:300])
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.val_run)
        b.wait("loomDashboard.plotted('val_loss') === null", 10, "validation chart gone with its run")

        # a running run: its curve grows between two reads
        b.js("document.querySelector('input[data-run=\"%s\"]').click()" % a.running)
        grow = "((loomDashboard.plotted('loss') || []).find(s => s.id === %s) || {x: []}).x.length" % json.dumps(a.running)
        b.wait(grow + " > 0", 15, "running run's curve drawn")
        n1, polls = b.js(grow), b.js("loomDashboard.polls()")
        b.wait("loomDashboard.polls() >= %d && %s > %d" % (polls + 2, grow, n1), 20, "running curve grows")
        n2 = b.js(grow)
        check("running run's curve grows while the page polls (%d -> %d points)" % (n1, n2), n2 > n1 > 0)
        # what the page assembled from its incremental reads is the file's first lines, exactly
        p = [s for s in b.js("loomDashboard.plotted('loss')") if s["id"] == a.running][0]
        run_file = pairs(metrics_columns(run_dir[a.running]["run_dir"]), "step", "loss")
        drawn = list(zip(p["x"], p["y"]))
        appends = b.js("loomDashboard.state.appends")
        check("running curve after %d incremental reads = the first %d lines of its metrics.jsonl" % (appends, len(drawn)),
              appends > 0 and len(drawn) > n1 and drawn == [(float(x), float(y)) for x, y in run_file[:len(drawn)]],
              "%d drawn, %d in file" % (len(drawn), len(run_file)))
        status = b.js("loomDashboard.state.metrics[%s].status" % json.dumps(a.running))
        check("running run reported as running", status == "running", str(status))

        # config diff against `loom runs compare`
        cmp = subprocess.run([a.loom, "runs", "--runs-dir", a.runs_dir, "compare", *a.diff],
                             capture_output=True, text=True, timeout=60).stdout
        section = cmp.split("config differences:")[1].split("metrics:")[0].strip().splitlines()[1:]
        want = [line.split()[0] for line in section if line.strip()]
        b.js("document.getElementById('diff-a').value = %s; document.getElementById('diff-b').value = %s;"
             "document.getElementById('diff-go').click()" % (json.dumps(a.diff[0]), json.dumps(a.diff[1])))
        b.wait("!!document.querySelector('#diff-table')", 10, "diff table shown")
        got = b.js("[...document.querySelectorAll('#diff-table tbody tr')].map(r => r.cells[0].textContent)")
        check("config diff keys = `loom runs compare` (%s)" % ", ".join(want), got == want and len(want) > 0,
              "page %s vs cli %s" % (got, want))

        # a sweep's summary table, and the simulator's trace link of its row
        check("the sweeps panel lists a sweep", b.js("document.querySelectorAll('#sweeps tbody tr').length") > 0)
        if b.js("document.querySelectorAll('#sweeps tbody tr').length") > 0:
            b.js("document.querySelector('#sweeps tbody a').click()")
            b.wait("!!document.querySelector('#sweep-summary')", 10, "sweep summary shown")
            sdir = b.js("loomDashboard.state.sweepDir")
            csv_rows = sum(1 for _ in open(os.path.join(sdir, "summary.csv"))) - 1 if sdir else -1
            check("sweep summary: one table row per summary.csv row (%d)" % csv_rows,
                  b.js("document.querySelectorAll('#sweep-summary tbody tr').length") == csv_rows > 0)
            sweep_runs = [r["run_id"] for r in loom_json(a.loom, a.runs_dir, "--filter", "sweep_id = '%s'" % os.path.basename(sdir))]
            b.js("[...document.querySelectorAll('#sweep-detail button')].find(x => x.textContent.startsWith('plot its')).click()")
            b.wait("%s.every(id => loomDashboard.state.selected.includes(id))" % json.dumps(sweep_runs), 10, "sweep runs ticked")
            check("'plot its runs' ticks the sweep's %d registered runs" % len(sweep_runs),
                  len(sweep_runs) > 0 and all(x in b.js("loomDashboard.state.selected") for x in sweep_runs))
            href = b.js("(document.querySelector('#sweeps tbody a[download]') || {getAttribute: () => null}).getAttribute('href')")
            size = b.js("fetch(%s).then(r => r.arrayBuffer()).then(x => x.byteLength)" % json.dumps(href)) if href else None
            check("sweep row: the trace link downloads the sweep's sim_trace.json",
                  href is not None and sdir is not None and size == os.path.getsize(os.path.join(sdir, "sim_trace.json")),
                  "%s: %s bytes" % (href, size))

        # zoom: drag the mouse across the first quarter of the loss chart, as a user would
        rect = b.js("(() => { const c = document.querySelector('#charts .chart canvas'); c.scrollIntoView();"
                    " const r = c.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
        x0, y = rect[0] + 50, rect[1] + rect[3] / 2  # from the left margin: step 1 stays in
        x1 = rect[0] + 62 + (rect[2] - 76) * 0.25
        b.call("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y, button="left", clickCount=1)
        for k in range(1, 6):
            b.call("Input.dispatchMouseEvent", type="mouseMoved", x=x0 + (x1 - x0) * k / 5, y=y, button="left")
        b.call("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y, button="left", clickCount=1)
        zoom = b.js("loomDashboard.state.zoom")
        p = b.js("loomDashboard.plotted('loss')")
        inside = zoom and all(zoom[0] <= x <= zoom[1] for s in p for x in s["x"])
        want = [(float(x), float(y)) for x, y in pairs(fin, "step", "loss") if zoom and zoom[0] <= x <= zoom[1]]
        got = [(x, y) for s in p if s["id"] == a.finished for x, y in zip(s["x"], s["y"])]
        longest = max(len(s["x"]) for s in p)
        check("drag-zoom on x: every drawn point inside the range, the finished run's points there = metrics.jsonl",
              bool(zoom) and zoom[1] > zoom[0] and inside and got == want and len(want) > 0,
              "zoom %s, drawn %s" % (zoom, got[:3]))
        total = b.js("loomDashboard.state.metrics[%s].fields.loss.length" % json.dumps(a.running))
        check("drag-zoom: the running run drawn only in part (%d of %d points)" % (longest, total),
              0 < longest < total)
        for clicks in (1, 2):
            for kind in ("mousePressed", "mouseReleased"):
                b.call("Input.dispatchMouseEvent", type=kind, x=x0 + 20, y=y, button="left", clickCount=clicks)
        check("double-click zooms out", b.js("loomDashboard.state.zoom") is None, str(b.js("loomDashboard.state.zoom")))

        # log y for the screenshot: the finished runs' early steps next to the long run
        b.js("document.getElementById('logy').click()")
        p = b.js("loomDashboard.plotted('loss')")
        check("log y: the same points drawn (losses are > 0)",
              [(x, y) for s in p if s["id"] == a.finished for x, y in zip(s["x"], s["y"])] ==
              [(float(x), float(y)) for x, y in pairs(fin, "step", "loss")])
        # axis ticks: every label reads as the value it is drawn at (no "2" at 2.5, no 6.31 on a
        # log axis), linear ticks are evenly spaced round numbers inside the range
        def label_value(text):
            m = {"k": 1e3, "M": 1e6}.get(text[-1], 1)
            return float(text[:-1] if m != 1 else text) * m
        bad = []
        for lo, hi, n in ((0, 10, 5), (1, 6, 4), (0.3, 5.9, 6), (1, 12345, 5), (-2.5, 7.25, 6), (0, 2.4e6, 4),
                          (4.6, 5.7, 5), (0.00012, 0.00031, 4), (1, 1e5, 6)):
            ticks = b.js("LoomPlot.linearTicks(%r, %r, %d)" % (lo, hi, n))
            vals = [t["v"] for t in ticks]
            steps = {round(v2 - v1, 12) for v1, v2 in zip(vals, vals[1:])}
            if (len(ticks) < 2 or len(steps) != 1 or any(not (lo - 1e-12 <= v <= hi + 1e-12) for v in vals) or
                    any(abs(label_value(t["label"]) - t["v"]) > 1e-9 * max(1, abs(t["v"])) for t in ticks)):
                bad.append(("linear", lo, hi, ticks))
        for lo, hi in ((0.2, 6), (1.5, 5.5), (1e-4, 10), (3, 3000), (0.9, 1.3)):
            ticks = b.js("LoomPlot.logTicks(%r, %r)" % (lo, hi))
            if len(ticks) < 2 or any(abs(label_value(t["label"].replace("e", "E") if "e" in t["label"] and not t["label"][-1].isalpha()
                                                  else t["label"]) - t["v"]) > 1e-9 * abs(t["v"]) or not lo <= t["v"] <= hi
                                     for t in ticks):
                bad.append(("log", lo, hi, ticks))
        check("axis tick labels equal the values they mark (linear and log)", not bad, str(bad)[:600])

        # a run's detail panel and its Chrome trace link
        b.js("[...document.querySelectorAll('#runs a.runid')].find(x => x.textContent === %s).click()" % json.dumps(a.traced))
        b.wait("!!document.querySelector('#detail a[download]')", 10, "trace link shown")
        href = b.js("document.querySelector('#detail a[download]').getAttribute('href')")
        size = b.js("fetch(%s).then(r => r.arrayBuffer()).then(x => x.byteLength)" % json.dumps(href))
        trace = os.path.join(run_dir[a.traced]["run_dir"], "trace.json")
        check("run detail: the trace link downloads the run's trace.json (%s bytes)" % size,
              size == os.path.getsize(trace) and "file=trace.json" in href, "%s: %s bytes" % (href, size))

        # smoothing: an EMA with bias correction drawn over the raw curve; the raw points stay
        b.js("{ const s = document.getElementById('smooth'); s.value = '0.9'; s.dispatchEvent(new Event('input')) }")
        p = b.js("loomDashboard.plotted('loss')")
        raw = [(x, y) for s in p if s["id"] == a.finished for x, y in zip(s["x"], s["y"])]
        check("smoothing on: the raw points are still what is plotted", raw == [(float(x), float(y)) for x, y in pairs(fin, "step", "loss")])
        ys = [float(y) for _, y in pairs(fin, "step", "loss")]
        acc = norm = 0.0
        want = []
        for y in ys:  # the same recurrence in Python doubles
            acc = acc * 0.9 + (1 - 0.9) * y
            norm = norm * 0.9 + (1 - 0.9)
            want.append(acc / norm)
        got = b.js("LoomPlot.ema(%s, 0.9)" % json.dumps(ys))
        # same IEEE double operations in the same order: equal to rounding, 1e-15 relative
        check("smoothing = EMA with bias correction (w 0.9), to 1e-15 relative",
              len(got) == len(want) and all(abs(g - w) <= 1e-15 * abs(w) for g, w in zip(got, want)), "%s vs %s" % (got[:3], want[:3]))
        b.js("window.scrollTo(0, 0)")
        shot = b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(a.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        check("screenshot saved to " + a.screenshot, os.path.getsize(a.screenshot) > 10000)
        b.pump(1.0)
        check("no console errors or exceptions", not b.errors, "; ".join(b.errors))
        # the collector itself works: an uncaught exception in the page is seen
        b.js("setTimeout(() => { throw new Error('probe of the error collector') }, 0)")
        b.pump(1.0)
        check("an uncaught exception would be caught", any("probe of the error collector" in e for e in b.errors),
              str(b.errors))
        b.errors = [e for e in b.errors if "probe of the error collector" not in e]

        # "live" off: no more polls
        b.js("document.getElementById('live').click()")
        b.pump(2.5)
        polls = b.js("loomDashboard.polls()")
        b.pump(4.5)
        check("live off: the page stops polling", b.js("loomDashboard.polls()") == polls, "%d -> %d" % (polls, b.js("loomDashboard.polls()")))

        # the link of `loom runs serve --filter .. --sort-by .. --show .. --limit ..` opens that view
        args = json.loads(a.view_args)
        cli = loom_json(a.loom, a.runs_dir, *args)
        b.call("Page.navigate", url="about:blank")
        b.call("Page.navigate", url=a.view_url)
        b.wait("!!(window.loomDashboard && window.loomDashboard.ready)", 30, "view link ready")
        rows = b.js("[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run)")
        heads = b.js("[...document.querySelectorAll('#runs thead th')].slice(1).map(h => h.firstChild.textContent.replace(/ [\\u25b4\\u25be]$/, ''))")
        check("the command line's view link shows `loom runs %s`: %d rows, columns %s" % (" ".join(args), len(cli), heads),
              rows == [r["run_id"] for r in cli] and heads == list(cli[0].keys()) and len(cli) > 1,
              "page %s %s" % (rows, heads))
        b.pump(1.0)
        check("no console errors on the view link", not b.errors, "; ".join(b.errors))

        # a bad filter: the parser's message in the page (its 400 is the one expected error)
        bad = "training.lr >> 1"
        cli = subprocess.run([a.loom, "runs", "--runs-dir", a.runs_dir, "--filter", bad],
                             capture_output=True, text=True, timeout=60)
        before = b.js("loomDashboard.rowCount()")
        b.js("document.getElementById('filter').value = %s; document.getElementById('apply').click()" % json.dumps(bad))
        b.wait("!document.getElementById('error').hidden", 10, "error shown for a bad filter")
        shown = b.js("document.getElementById('error').textContent")
        check("bad filter: the page shows the parser's message, as the CLI prints it",
              cli.returncode != 0 and shown and shown in cli.stderr and "expected" in shown,
              "page %r, cli %r" % (shown, cli.stderr))
        check("bad filter: the last good table stays (%d rows)" % before, b.js("loomDashboard.rowCount()") == before > 0)
    finally:
        b.close()
    print("dashboard_check: %d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
