/* chart.js: the dashboard's line chart, plain canvas. One LoomChart draws one metric of several
 * runs overlaid: linear or log y, ticks at round values (1, 2, 5 x 10^k; decades on log y),
 * drag across to zoom x, double-click to zoom out, hover for the values at a step, optional
 * smoothing (an EMA drawn over the faint raw curve). The points it drew (raw, before any
 * smoothing) are kept in chart.plotted (the test reads them: they must equal metrics.jsonl). */
'use strict';

const LoomPlot = (() => {
  /* 1, 2 or 5 x 10^k whose tick count over span is nearest the target (in ratio) */
  function niceStep(span, target) {
    const raw = span / Math.max(1, target), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    let best = mag;
    for (const m of [1, 2, 5, 10])
      if (Math.abs(Math.log(m * mag / raw)) < Math.abs(Math.log(best / raw))) best = m * mag;
    return best;
  }
  function decimalsOf(step) { return Math.max(0, Math.min(12, -Math.floor(Math.log10(step) + 1e-9))); }

  /* round ticks covering [lo, hi]; each is an exact multiple of the step, labelled with as
     many decimals as the step has, in one unit for the whole axis (k = 1e3, M = 1e6) */
  function linearTicks(lo, hi, target) {
    const step = niceStep(hi - lo, target), big = Math.max(Math.abs(lo), Math.abs(hi)), out = [];
    const unit = big >= 1e6 && step >= 1e5 ? [1e6, 'M'] : big >= 1e4 && step >= 1e3 ? [1e3, 'k'] : [1, ''];
    const d = decimalsOf(step / unit[0]);
    for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) {
      const v = k * step, a = Math.abs(v);
      let label = (v / unit[0]).toFixed(d) + (v === 0 ? '' : unit[1]);
      if (unit[0] === 1 && a !== 0 && (a < 1e-4 || d > 6)) label = v.toExponential(1);
      out.push({ v, label });
    }
    return out;
  }
  function trim(s) { return s.indexOf('.') >= 0 ? s.replace(/0+$/, '').replace(/\.$/, '') : s; }

  /* log axis: powers of ten, with 2 and 5 between them when the range spans few decades */
  function logTicks(lo, hi) {
    const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi)), out = [];
    const mant = b - a <= 1 ? [1, 2, 3, 5, 7] : b - a <= 3 ? [1, 2, 5] : [1];
    for (let e = a; e <= b; e++)
      for (const m of mant) {
        const v = m * Math.pow(10, e);
        if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12))
          out.push({ v, label: e >= -3 && e <= 5 ? trim(v.toFixed(Math.max(0, -e))) : m + 'e' + e });
      }
    return out.length >= 2 ? out : linearTicks(lo, hi, 4).filter(t => t.v > 0);
  }
  /* exponential moving average with bias correction (TensorBoard's smoothing): weight w of the
     past, 0 <= w < 1 */
  function ema(ys, w) {
    const out = new Array(ys.length);
    let acc = 0, norm = 0;
    for (let i = 0; i < ys.length; i++) {
      acc = acc * w + (1 - w) * ys[i];
      norm = norm * w + (1 - w);
      out[i] = acc / norm;
    }
    return out;
  }
  function formatValue(v) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-4 || a >= 1e7) ? v.toExponential(5) : String(Number(v.toPrecision(7)));
  }

  class Chart {
    constructor(parent, title) {
      this.title = title;
      this.box = document.createElement('div');
      this.box.className = 'chart';
      this.canvas = document.createElement('canvas');
      this.tip = document.createElement('div');
      this.tip.className = 'tip';
      this.box.append(this.canvas, this.tip);
      parent.appendChild(this.box);
      this.series = [];
      this.opts = {};
      this.plotted = [];
      this.hoverPx = null;
      this.dragFrom = null;
      this.dragTo = null;
      this.canvas.addEventListener('mousedown', e => { this.dragFrom = this.dragTo = this.px(e); });
      this.canvas.addEventListener('mousemove', e => this.onMove(e));
      this.canvas.addEventListener('mouseleave', () => { this.hoverPx = null; this.tip.style.display = 'none'; this.draw(); });
      window.addEventListener('mouseup', e => this.onUp(e));
      this.canvas.addEventListener('dblclick', () => this.opts.onZoom && this.opts.onZoom(null));
    }
    px(e) { const r = this.canvas.getBoundingClientRect(); return { x: e.clientX - r.left, y: e.clientY - r.top }; }
    remove() { this.box.remove(); }

    /* series: [{id, label, color, x: [...], y: [...]}] (null = no value);
       opts: {logY, xLabel, xRange: [lo, hi] or null, onZoom(range or null)} */
    set(series, opts) { this.series = series; this.opts = opts; this.draw(); }

    layout() {
      const dpr = window.devicePixelRatio || 1, w = this.canvas.clientWidth || 400, h = this.canvas.clientHeight || 260;
      if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(h * dpr)) {
        this.canvas.width = Math.round(w * dpr);
        this.canvas.height = Math.round(h * dpr);
      }
      const ctx = this.canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      return { ctx, w, h, L: 62, R: 14, T: 26, B: 36 };
    }

    /* the points that will be drawn: finite x and y, y > 0 on a log axis, x in the zoom range */
    visible() {
      const { logY, xRange } = this.opts;
      return this.series.map(s => {
        const x = [], y = [];
        for (let i = 0; i < s.x.length; i++) {
          const a = s.x[i], b = s.y[i];
          if (a === null || b === null || !isFinite(a) || !isFinite(b)) continue;
          if (logY && b <= 0) continue;
          if (xRange && (a < xRange[0] || a > xRange[1])) continue;
          x.push(a); y.push(b);
        }
        return { id: s.id, label: s.label, color: s.color, x, y };
      });
    }

    draw() {
      const { ctx, w, h, L, R, T, B } = this.layout();
      const { logY, xRange, xLabel } = this.opts;
      ctx.clearRect(0, 0, w, h);
      ctx.font = '12px system-ui, sans-serif';
      ctx.fillStyle = '#1d2330';
      ctx.textAlign = 'left';
      ctx.fillText(this.title + (logY ? ' (log)' : ''), L, 16);
      const vis = this.visible();
      this.plotted = vis;
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      for (const s of vis)
        for (let i = 0; i < s.x.length; i++) {
          x0 = Math.min(x0, s.x[i]); x1 = Math.max(x1, s.x[i]);
          y0 = Math.min(y0, s.y[i]); y1 = Math.max(y1, s.y[i]);
        }
      if (xRange) { x0 = xRange[0]; x1 = xRange[1]; }
      if (!isFinite(x0) || !isFinite(y0)) {
        ctx.fillStyle = '#6b7280';
        ctx.textAlign = 'center';
        ctx.fillText(this.series.length ? 'no points' + (logY ? ' above 0' : '') + ' in range' : 'no runs selected', w / 2, h / 2);
        this.scale = null;
        return;
      }
      if (x1 === x0) { x0 -= 1; x1 += 1; }
      let ly0, ly1;
      if (logY) {
        ly0 = Math.log10(y0); ly1 = Math.log10(y1);
        if (ly1 === ly0) { ly0 -= 0.5; ly1 += 0.5; }
        const pad = (ly1 - ly0) * 0.05; ly0 -= pad; ly1 += pad;
      } else {
        if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
        const pad = (y1 - y0) * 0.05; ly0 = y0 - pad; ly1 = y1 + pad;
      }
      const pw = w - L - R, ph = h - T - B;
      const sx = v => L + (v - x0) / (x1 - x0) * pw;
      const sy = v => T + ph - ((logY ? Math.log10(v) : v) - ly0) / (ly1 - ly0) * ph;
      this.scale = { x0, x1, L, pw, sx, sy };
      /* grid and ticks */
      ctx.strokeStyle = '#eceef1';
      ctx.fillStyle = '#6b7280';
      ctx.lineWidth = 1;
      const yt = logY ? logTicks(Math.pow(10, ly0), Math.pow(10, ly1)) : linearTicks(ly0, ly1, Math.max(3, Math.round(ph / 45)));
      ctx.textAlign = 'right';
      for (const t of yt) {
        const y = Math.round(sy(t.v)) + 0.5;
        ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(L + pw, y); ctx.stroke();
        ctx.fillText(t.label, L - 6, y + 4);
      }
      const xt = linearTicks(x0, x1, Math.max(3, Math.round(pw / 90)));
      ctx.textAlign = 'center';
      for (const t of xt) {
        const x = Math.round(sx(t.v)) + 0.5;
        ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, T + ph); ctx.stroke();
        ctx.fillText(t.label, x, T + ph + 15);
      }
      ctx.fillText(xLabel || 'step', L + pw / 2, h - 4);
      ctx.strokeStyle = '#c4c9d1';
      ctx.strokeRect(L + 0.5, T + 0.5, pw, ph);
      /* curves, clipped to the plot area */
      ctx.save();
      ctx.beginPath(); ctx.rect(L, T, pw, ph); ctx.clip();
      const smooth = this.opts.smoothing || 0;
      for (const s of vis) {
        if (smooth > 0) { /* the raw curve faint, the smoothed one over it */
          ctx.globalAlpha = 0.25;
          this.line(ctx, s.x, s.y, sx, sy, s.color, pw);
          ctx.globalAlpha = 1;
          this.line(ctx, s.x, ema(s.y, smooth), sx, sy, s.color, pw);
        } else {
          this.line(ctx, s.x, s.y, sx, sy, s.color, pw);
        }
        if (s.x.length < 40) { /* short curves: mark the points */
          ctx.fillStyle = s.color;
          for (let i = 0; i < s.x.length; i++) { ctx.beginPath(); ctx.arc(sx(s.x[i]), sy(s.y[i]), 2.2, 0, 7); ctx.fill(); }
        }
      }
      ctx.restore();
      if (this.dragFrom && Math.abs(this.dragTo.x - this.dragFrom.x) > 2) {
        ctx.fillStyle = 'rgba(37, 99, 235, 0.12)';
        const a = Math.max(L, Math.min(this.dragFrom.x, this.dragTo.x)), b = Math.min(L + pw, Math.max(this.dragFrom.x, this.dragTo.x));
        ctx.fillRect(a, T, b - a, ph);
      }
      if (this.hoverPx !== null && this.hoverPx >= L && this.hoverPx <= L + pw) {
        ctx.strokeStyle = 'rgba(29, 35, 48, 0.35)';
        ctx.beginPath(); ctx.moveTo(this.hoverPx + 0.5, T); ctx.lineTo(this.hoverPx + 0.5, T + ph); ctx.stroke();
      }
    }

    /* one polyline; past 3 points per pixel column, each column is drawn as its first, lowest,
       highest and last point (what the full line would show at this width, far faster) */
    line(ctx, xs, ys, sx, sy, color, pw) {
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.6;
      ctx.beginPath();
      if (xs.length <= pw * 3) {
        for (let i = 0; i < xs.length; i++) (i ? ctx.lineTo : ctx.moveTo).call(ctx, sx(xs[i]), sy(ys[i]));
      } else {
        let col = null, lo = 0, hi = 0, last = 0, started = false;
        const flush = () => { ctx.lineTo(col, lo); ctx.lineTo(col, hi); ctx.lineTo(col, last); };
        for (let i = 0; i < xs.length; i++) {
          const px = Math.round(sx(xs[i])), py = sy(ys[i]);
          if (px !== col) {
            if (col !== null) flush();
            if (!started) { ctx.moveTo(px, py); started = true; } else ctx.lineTo(px, py);
            col = px; lo = hi = last = py;
          } else { lo = Math.min(lo, py); hi = Math.max(hi, py); last = py; }
        }
        if (col !== null) flush();
      }
      ctx.stroke();
    }

    toData(px) { const s = this.scale; return s.x0 + (px - s.L) / s.pw * (s.x1 - s.x0); }

    onMove(e) {
      const p = this.px(e);
      if (this.dragFrom) { this.dragTo = p; this.draw(); return; }
      if (!this.scale) return;
      this.hoverPx = p.x;
      const xv = this.toData(p.x), lines = [];
      let xs = null;
      for (const s of this.plotted) {
        let best = -1;
        for (let i = 0; i < s.x.length; i++) if (best < 0 || Math.abs(s.x[i] - xv) < Math.abs(s.x[best] - xv)) best = i;
        if (best >= 0) { xs = s.x[best]; lines.push(s.label + ': ' + formatValue(s.y[best])); }
      }
      this.draw();
      if (!lines.length) { this.tip.style.display = 'none'; return; }
      this.tip.textContent = (this.opts.xLabel || 'step') + ' ' + formatValue(xs) + '\n' + lines.join('\n');
      this.tip.style.display = 'block';
      const left = p.x + 14 + this.tip.offsetWidth > this.canvas.clientWidth ? p.x - 14 - this.tip.offsetWidth : p.x + 14;
      this.tip.style.left = left + 'px';
      this.tip.style.top = Math.max(0, p.y - 10) + 'px';
    }

    onUp(e) {
      if (!this.dragFrom) return;
      const a = this.dragFrom.x, b = this.dragTo.x;
      this.dragFrom = this.dragTo = null;
      if (this.scale && Math.abs(b - a) > 5 && this.opts.onZoom) {
        const lo = this.toData(Math.min(a, b)), hi = this.toData(Math.max(a, b));
        this.opts.onZoom([lo, hi]);
      } else this.draw();
    }
  }
  return { Chart, linearTicks, logTicks, formatValue, ema };
})();
