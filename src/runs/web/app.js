/* app.js: the dashboard's behaviour. The run table comes from /api/runs with the query the
 * form holds (filter, sweep, sort, show, hide, all columns, limit: the `loom runs` options,
 * evaluated by the server's C code; the first one ahead of this script, /api/boot.js). The
 * plotted runs are the ticked ones, or while none is ticked the runs in the table (the first
 * AUTO_MAX); their metrics.jsonl comes from /api/metrics, and every numeric field in it can be
 * charted: the metric picker lists the fields the plotted runs have (loss, val_loss,
 * grad_norm charted by default; lr, tokens_per_s, step_time, aux losses, user metrics on a
 * tick), one LoomPlot chart each. While "live" is on, the table and the curves of running
 * runs are re-read every POLL_MS. The view (query, selection, metrics, x, log y) is kept in the
 * URL's #fragment. window.loomDashboard exposes state for tests (rows shown, points plotted,
 * metrics offered, loading). */
'use strict';

const POLL_MS = 2000;
const AUTO_MAX = 20;       /* runs plotted while none is ticked: the table's first ones */
const DEFAULT_METRICS = ['loss', 'val_loss', 'grad_norm'];
const X_KEYS = ['step', 'tokens'];
const TITLES = { loss: 'loss', val_loss: 'validation loss', grad_norm: 'gradient norm', lr: 'learning rate',
                 tokens_per_s: 'tokens/s', step_time: 'step time (s)', val_perplexity: 'validation perplexity' };
const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04',
                 '#db2777', '#4b5563', '#65a30d', '#7c3aed', '#0d9488'];

const $ = id => document.getElementById(id);
const el = (tag, props, ...kids) => {
  const e = document.createElement(tag);
  if (props) for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
};

const state = {
  query: { filter: '', sweep: '', sort: '', desc: false, show: '', hide: '', all: false, limit: '' },
  selected: [],            /* run ids, in the order ticked (none: the table's runs are plotted) */
  shown: DEFAULT_METRICS.slice(), /* metrics charted, in order */
  loading: 0,              /* requests in flight that the page waits for */
  colors: {},              /* run id -> colour */
  metrics: {},             /* run id -> /api/metrics reply */
  names: {},               /* run id -> name (for labels) */
  xKey: 'step', logY: false, smoothing: 0, zoom: null,
  table: null, polls: 0, appends: 0, busy: false, lastError: null,
};
const charts = {};

/* %.6g, as the CLI's table prints numbers; integers in full */
function fmt(v) {
  if (v === null || v === undefined) return '-';
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return String(v);
  if (!isFinite(v)) return String(v);
  let e = Math.floor(Math.log10(Math.abs(v)));
  if (Number(Math.abs(v).toPrecision(6)) >= Math.pow(10, e + 1)) e++;
  if (e < -4 || e >= 6) {
    const [m, x] = v.toExponential(5).split('e');
    const n = parseInt(x, 10);
    return trimZeros(m) + 'e' + (n < 0 ? '-' : '+') + String(Math.abs(n)).padStart(2, '0');
  }
  return trimZeros(v.toFixed(Math.max(0, 5 - e)));
}
function trimZeros(s) { return s.indexOf('.') >= 0 ? s.replace(/0+$/, '').replace(/\.$/, '') : s; }

/* A request the user waits for: "loading" shows while any is in flight. */
async function waited(promise) {
  state.loading++;
  showLoading();
  try { return await promise; } finally { state.loading--; showLoading(); }
}
function showLoading() { $('curves-loading').hidden = state.loading === 0; }

async function api(path, params) {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== '' && v !== false && v !== null) qs.set(k, v === true ? '1' : v);
  const url = path + (qs.toString() ? '?' + qs : '');
  let res;
  try { res = await fetch(url, { cache: 'no-store' }); }
  catch (err) { return { ok: false, status: 0, data: { error: 'the server does not answer (loom runs serve stopped?)' } }; }
  let data = null;
  try { data = await res.json(); } catch (err) { data = { error: 'bad reply from ' + path }; }
  return { ok: res.ok, status: res.status, data };
}

/* ---- the view in the URL fragment ------------------------------------------------------ */
function saveHash() {
  const q = state.query, p = new URLSearchParams();
  for (const k of Object.keys(q)) if (q[k]) p.set(k, q[k] === true ? '1' : q[k]);
  if (state.selected.length) p.set('runs', state.selected.join(','));
  if (state.shown.join() !== DEFAULT_METRICS.join()) p.set('metrics', state.shown.join(','));
  if (state.xKey !== 'step') p.set('x', state.xKey);
  if (state.logY) p.set('logy', '1');
  if (state.smoothing) p.set('smooth', String(state.smoothing));
  history.replaceState(null, '', p.toString() ? '#' + p : location.pathname);
}
function loadHash() {
  const p = new URLSearchParams(location.hash.slice(1)), q = state.query;
  for (const k of Object.keys(q)) if (p.has(k)) q[k] = typeof q[k] === 'boolean' ? p.get(k) === '1' : p.get(k);
  if (p.get('runs')) for (const id of p.get('runs').split(',')) select(id, true);
  if (p.has('metrics')) state.shown = p.get('metrics').split(',').filter(Boolean);
  if (p.get('x')) state.xKey = p.get('x');
  state.logY = p.get('logy') === '1';
  state.smoothing = Math.min(0.99, Math.max(0, Number(p.get('smooth')) || 0));
  $('filter').value = q.filter; $('desc').checked = q.desc; $('show').value = q.show;
  $('hide').value = q.hide; $('all').checked = q.all; $('limit').value = q.limit;
  $('xkey').value = state.xKey; $('logy').checked = state.logY;
  $('smooth').value = String(state.smoothing); $('smooth-value').textContent = String(state.smoothing);
}

/* ---- the run table --------------------------------------------------------------------- */
function showError(msg) {
  state.lastError = msg;
  $('error').hidden = !msg;
  $('error').textContent = msg || '';
}

async function loadRuns() {
  const q = state.query;
  return tableReply(await api('/api/runs', { filter: q.filter, sweep: q.sweep, sort: q.sort, desc: q.desc,
                                             show: q.show, hide: q.hide, all: q.all, limit: q.limit }));
}

/* An /api/runs reply (or the boot script's): the table, or the error above the last good one. */
function tableReply(r) {
  if (!r.ok) {
    showError(r.data.error || ('HTTP ' + r.status));
    if (!state.table) $('runs').tBodies[0].replaceChildren(); /* no "loading" left behind */
    $('count').textContent = state.table ? 'the table above is from the last query that worked' : '';
    return false;
  }
  showError(null);
  state.table = r.data;
  $('registry').textContent = r.data.registry;
  renderTable(r.data);
  fillSortOptions(r.data.all_columns);
  fillSweepOptions(r.data.sweeps);
  return true;
}

function fillSortOptions(cols) {
  const sel = $('sort'), keep = state.query.sort;
  if (sel.options.length === cols.length + 1) return;
  sel.replaceChildren(el('option', { value: '', text: 'start time' }));
  for (const c of cols) sel.append(el('option', { value: c.name, text: c.name }));
  sel.value = keep;
}

function fillSweepOptions(names) {
  const sel = $('sweep'), keep = state.query.sweep;
  const all = [...new Set([...names, ...(keep ? [keep] : [])])];
  if ([...sel.options].slice(1).map(o => o.value).join('\n') === all.join('\n')) return;
  sel.replaceChildren(el('option', { value: '', text: 'all' }), ...all.map(n => el('option', { value: n, text: n })));
  sel.value = keep;
}

/* Columns in display order (indices into t.columns): as asked with show / all columns; the
   default set puts the results next to the run's identity, so that the metrics are in sight
   on a laptop screen: run_id, name, status, steps, the metrics and custom metrics, the config
   keys that differ, then the other run fields (start time, ranks, ...). */
function displayOrder(t) {
  const idx = t.columns.map((c, i) => i);
  if (state.query.show || state.query.all) return idx;
  const rank = c => ['run_id', 'name', 'status', 'steps'].includes(c.name) ? ['run_id', 'name', 'status', 'steps'].indexOf(c.name)
    : c.kind === 'metric' || c.kind === 'custom' ? 10 : c.kind === 'config' ? 20 : 30;
  return idx.sort((a, b) => rank(t.columns[a]) - rank(t.columns[b]) || a - b);
}

/* The runs plotted: the ticked ones, else the first AUTO_MAX of the table. */
function plottedIds() {
  if (state.selected.length) return state.selected;
  return state.table ? state.table.run_ids.filter(Boolean).slice(0, AUTO_MAX) : [];
}
function colorOf(id) {
  if (!state.colors[id]) {
    const used = new Set(Object.values(state.colors));
    state.colors[id] = PALETTE.find(c => !used.has(c)) || PALETTE[Object.keys(state.colors).length % PALETTE.length];
  }
  return state.colors[id];
}

function renderTable(t) {
  const head = el('tr', null, el('th', { title: 'tick runs to plot only those (none ticked: the runs in the table)' }, 'plot'));
  const order = displayOrder(t), plotted = new Set(plottedIds());
  order.map(j => t.columns[j]).forEach(c => {
    const arrow = state.query.sort === c.name ? (state.query.desc ? ' \u25be' : ' \u25b4') : '';
    head.append(el('th', { title: c.kind + ' column; click to sort', onclick: () => sortBy(c.name) },
                   c.name + arrow, el('span', { class: 'kind', text: c.kind === 'run' ? '' : c.kind[0] })));
  });
  $('runs').tHead.replaceChildren(head);
  const nameCol = t.columns.findIndex(c => c.name === 'name');
  const rows = t.rows.map((row, i) => {
    const id = t.run_ids[i];
    if (nameCol >= 0 && row[nameCol]) state.names[id] = row[nameCol];
    const on = state.selected.includes(id);
    const box = el('input', { type: 'checkbox', 'data-run': id, onchange: e => { select(id, e.target.checked); refreshCurves(); } });
    box.checked = on;
    const sw = plotted.has(id) ? el('span', { class: 'swatch', style: 'background:' + colorOf(id) }) : null;
    const tr = el('tr', { class: on ? 'selected' : '', 'data-run': id }, el('td', null, box, sw));
    order.forEach(j => {
      const v = row[j], c = t.columns[j].name;
      if (c === 'run_id') tr.append(el('td', null, el('a', { class: 'runid', text: v, onclick: () => showRun(id) })));
      else if (c === 'status' && v) tr.append(el('td', null, el('span', { class: 'status ' + v, text: v })));
      else tr.append(el('td', { class: v === null ? 'null' : typeof v === 'number' ? 'num' : 'text', text: fmt(v), title: v === null ? '' : String(v) }));
    });
    return tr;
  });
  $('runs').tBodies[0].replaceChildren(...rows);
  const running = t.statuses.filter(s => s === 'running').length;
  $('count').textContent = t.count + ' run' + (t.count === 1 ? '' : 's') + (running ? ', ' + running + ' running' : '');
  fillDiffOptions();
}

function sortBy(name) {
  if (state.query.sort === name) state.query.desc = !state.query.desc;
  else { state.query.sort = name; state.query.desc = false; }
  $('sort').value = name; $('desc').checked = state.query.desc;
  saveHash();
  loadRuns();
}

function select(id, on) {
  const i = state.selected.indexOf(id);
  if (on && i < 0) {
    state.selected.push(id);
    colorOf(id);
  } else if (!on && i >= 0) state.selected.splice(i, 1);
  saveHash();
}

/* ---- curves ---------------------------------------------------------------------------- */
/* A run's metrics.jsonl: in full the first time, then only the lines written since (the
   reply's next_offset); a reply read from offset 0 (first time, or the file was rewritten)
   replaces what the page had. */
async function loadMetrics(ids) {
  await waited(Promise.all(ids.map(async id => {
    const old = state.metrics[id], from = old && old.fields && !old.error ? old.next_offset || 0 : 0;
    const r = await api('/api/metrics', { run: id, offset: from ? String(from) : '' });
    if (!r.ok) { state.metrics[id] = { error: r.data.error, fields: {} }; return; }
    const d = r.data;
    if (!(old && from && d.offset === from)) { state.metrics[id] = d; return; }
    for (const k of Object.keys(d.fields)) if (!old.fields[k]) old.fields[k] = new Array(old.lines).fill(null);
    for (const k of Object.keys(old.fields)) old.fields[k] = old.fields[k].concat(d.fields[k] || new Array(d.lines).fill(null));
    old.lines += d.lines;
    state.appends++;
    for (const k of ['status', 'next_offset', 'partial_last_line', 'missing']) old[k] = d[k];
  })));
}

async function refreshCurves() {
  if (state.table) renderTable(state.table);
  const missing = plottedIds().filter(id => !state.metrics[id]);
  if (missing.length) await loadMetrics(missing);
  renderCharts();
}

/* Every numeric field of the plotted runs' metrics.jsonl but the x axes: the metric picker's
   entries, the charted ones first (in their order), then the rest by name. */
function metricsOffered() {
  const keys = new Set();
  for (const id of plottedIds()) {
    const m = state.metrics[id];
    if (m && m.fields) for (const k of Object.keys(m.fields)) if (!X_KEYS.includes(k)) keys.add(k);
  }
  const rest = [...keys].filter(k => !state.shown.includes(k)).sort();
  return [...state.shown.filter(k => keys.has(k) || k === 'loss'), ...rest];
}

function renderPicker() {
  const offered = metricsOffered(), box = $('metric-picker');
  const now = [...box.querySelectorAll('input')].map(i => i.dataset.metric + (i.checked ? '+' : '-')).join();
  if (now === offered.map(k => k + (state.shown.includes(k) ? '+' : '-')).join()) return;
  box.replaceChildren(el('span', { class: 'muted', text: 'metrics:' }), ...offered.map(k => {
    const cb = el('input', { type: 'checkbox', 'data-metric': k, onchange: e => {
      if (e.target.checked && !state.shown.includes(k)) state.shown.push(k);
      if (!e.target.checked) state.shown = state.shown.filter(x => x !== k);
      saveHash();
      renderCharts();
    } });
    cb.checked = state.shown.includes(k);
    return el('label', { title: TITLES[k] || k }, cb, k);
  }));
}

function renderCharts() {
  const sel = plottedIds(), auto = !state.selected.length;
  const total = state.table ? state.table.run_ids.length : 0;
  $('selection').textContent = !sel.length ? 'no runs in the table' : auto
    ? 'the ' + (total > sel.length ? 'first ' + sel.length + ' of the ' + total : sel.length) + ' run' + (sel.length === 1 ? '' : 's') +
      ' in the table ' + (sel.length === 1 ? 'is' : 'are') + ' plotted; tick runs to plot only those'
    : sel.length + ' ticked run' + (sel.length === 1 ? '' : 's') + ' plotted (untick all: the runs in the table)';
  $('legend').replaceChildren(...sel.map(id => {
    const m = state.metrics[id] || {}, live = m.status === 'running' ? ' (running)' : '';
    const err = m.error ? ' \u2014 ' + m.error : m.missing ? ' \u2014 no ' + m.path + ' (yet)' : '';
    return el('span', null, el('span', { class: 'swatch', style: 'background:' + colorOf(id) }),
              label(id) + live + err);
  }));
  renderPicker();
  for (const key of Object.keys(charts)) /* metrics unticked */
    if (!state.shown.includes(key)) { charts[key].remove(); delete charts[key]; }
  for (const key of state.shown) {
    const has = key === 'loss' || sel.some(id => state.metrics[id] && state.metrics[id].fields[key]);
    if (!has) { if (charts[key]) { charts[key].remove(); delete charts[key]; } continue; }
    if (!charts[key]) charts[key] = new LoomPlot.Chart($('charts'), TITLES[key] && TITLES[key] !== key ? TITLES[key] + ' (' + key + ')' : key);
    /* the runs that logged this metric (every plotted run on the loss chart) */
    const series = sel.filter(id => state.metrics[id] && (key === 'loss' || state.metrics[id].fields[key])).map(id => {
      const f = state.metrics[id].fields;
      return { id, label: label(id), color: colorOf(id), x: f[state.xKey] || [], y: f[key] || [] };
    });
    charts[key].set(series, { logY: state.logY, xLabel: state.xKey, xRange: state.zoom, smoothing: state.smoothing,
                              onZoom: r => { state.zoom = r; renderCharts(); } });
  }
  /* keep the charts in the order they were ticked (loss first) */
  for (const key of state.shown) if (charts[key]) $('charts').appendChild(charts[key].box);
}

function label(id) { return state.names[id] && state.names[id] !== id ? state.names[id] + ' (' + id + ')' : id; }

/* ---- config diff, run detail ----------------------------------------------------------- */
function fillDiffOptions() {
  const ids = [...state.selected];
  if (state.table) for (const id of state.table.run_ids) if (!ids.includes(id)) ids.push(id);
  for (const [sel, k] of [[$('diff-a'), 0], [$('diff-b'), 1]]) {
    const keep = sel.value;
    /* rebuilt only when the runs change: a menu the user has open stays open across polls */
    if ([...sel.options].map(o => o.value + '\t' + o.textContent).join('\n') === ids.map(id => id + '\t' + label(id)).join('\n')) continue;
    sel.replaceChildren(...ids.map(id => el('option', { value: id, text: label(id) })));
    sel.value = ids.includes(keep) ? keep : (ids[k] || '');
  }
}

async function showDiff() {
  const a = $('diff-a').value, b = $('diff-b').value, out = $('diff');
  if (!a || !b) { out.replaceChildren(el('p', { class: 'muted', text: 'pick two runs' })); return; }
  const r = await api('/api/diff', { a, b });
  if (!r.ok) { out.replaceChildren(el('div', { class: 'error', text: r.data.error })); return; }
  const d = r.data;
  const rows = d.differ.map(x => el('tr', null, el('td', { text: x.key }),
                                    el('td', { class: 'diff-a', text: fmt(x.a) }), el('td', { class: 'diff-b', text: fmt(x.b) })));
  out.replaceChildren(
    el('table', { class: 'kv', id: 'diff-table' },
       el('thead', null, el('tr', null, el('th', { text: 'config key' }), el('th', { class: 'diff-a', text: label(d.a) }),
                            el('th', { class: 'diff-b', text: label(d.b) }))),
       el('tbody', null, ...rows)),
    el('p', { class: 'muted', text: d.differ.length + ' key' + (d.differ.length === 1 ? '' : 's') + ' differ, ' + d.same + ' equal' }));
}

function kvTable(obj) {
  return el('table', { class: 'kv' }, el('tbody', null, ...Object.entries(obj).map(([k, v]) =>
    el('tr', null, el('td', { text: k }), el('td', { text: fmt(v) })))));
}

function traceLinks(traces, param, value) {
  if (!traces || !traces.length) return null;
  return el('p', null, 'Chrome trace: ', ...traces.map(f =>
    el('a', { href: '/api/trace?' + new URLSearchParams({ [param]: value, file: f }), download: f, text: f + ' ' })),
    el('span', { class: 'muted', text: ' (open in chrome://tracing or ui.perfetto.dev)' }));
}

async function showRun(id) {
  const r = await api('/api/run', { id });
  $('detail-title').textContent = id;
  if (!r.ok) { $('detail').replaceChildren(el('div', { class: 'error', text: r.data.error })); return; }
  const f = r.data.fields, parts = [traceLinks(r.data.traces, 'run', id)];
  for (const [k, title] of [['run', 'run'], ['metric', 'metrics'], ['custom', 'custom metrics']])
    if (Object.keys(f[k]).length) parts.push(el('h3', { text: title }), kvTable(f[k]));
  if (Object.keys(f.config).length) /* long: folded */
    parts.push(el('details', null, el('summary', { text: 'config (' + Object.keys(f.config).length + ' keys)' }), kvTable(f.config)));
  $('detail').replaceChildren(...parts.filter(Boolean));
}

/* ---- sweeps ---------------------------------------------------------------------------- */
async function loadSweeps() {
  const r = await api('/api/sweeps');
  if (!r.ok) return;
  const list = r.data.sweeps;
  $('sweeps-note').textContent = list.length ? '' : 'no sweep directories under the runs dir or ./logs (loom runs serve --sweeps-dir DIR for another)';
  if (!list.length) { $('sweeps').replaceChildren(); return; }
  const rows = list.map(s => el('tr', null,
    el('td', null, el('a', { class: 'runid', text: s.id, onclick: () => showSweep(s.id) })),
    el('td', { text: s.sweep || '-' }), el('td', { text: s.launcher || '-' }), el('td', { class: 'num', text: String(s.points) }),
    el('td', { text: Object.entries(s.by_status).map(([k, v]) => v + ' ' + k).join(', ') }),
    el('td', null, traceLinks(s.traces, 'sweep', s.id))));
  $('sweeps').replaceChildren(el('table', null,
    el('thead', null, el('tr', null, ...['execution', 'sweep', 'launcher', 'points', 'status', 'trace'].map(h => el('th', { text: h })))),
    el('tbody', null, ...rows)));
}

async function showSweep(id) {
  const r = await api('/api/sweep', { dir: id });
  const out = $('sweep-detail');
  if (!r.ok) { out.replaceChildren(el('div', { class: 'error', text: r.data.error })); return; }
  const s = r.data, parts = [el('h3', { text: id + ' \u2014 ' + (s.sweep || '') + ' (' + s.dir + ')' })];
  state.sweepDir = s.dir;
  if (s.run_ids.length)
    parts.push(el('p', null, el('button', { type: 'button', text: 'plot its ' + s.run_ids.length + ' runs',
      onclick: () => { for (const rid of s.run_ids) select(rid, true); refreshCurves(); } }), ' ',
      el('button', { type: 'button', text: 'show only its runs in the table',
        onclick: () => { state.query.sweep = s.sweep || ''; $('sweep').value = state.query.sweep; saveHash(); loadRuns(); } })));
  if (s.summary_csv && s.summary_csv.columns.length) {
    const cols = s.summary_csv.columns;
    parts.push(el('div', { class: 'table-wrap' }, el('table', { id: 'sweep-summary' },
      el('thead', null, el('tr', null, ...cols.map(c => el('th', { text: c })))),
      el('tbody', null, ...s.summary_csv.rows.map(row => el('tr', null, ...row.map(v => {
        const n = v !== '' && !isNaN(Number(v));
        return el('td', { class: n ? 'num' : '', text: n ? fmt(Number(v)) : v, title: v });
      })))))));
  } else parts.push(el('p', { class: 'muted', text: 'no summary.csv yet (the sweep is running, or `loom sweep summary` was not run)' }));
  parts.push(traceLinks(s.traces, 'sweep', id));
  if (s.summary_txt) parts.push(el('details', null, el('summary', { text: 'summary.txt' }), el('pre', { text: s.summary_txt })));
  out.replaceChildren(...parts.filter(Boolean));
}

/* ---- live updates ---------------------------------------------------------------------- */
async function poll() {
  if (state.busy) return;
  state.busy = true;
  try {
    await loadRuns();
    const live = plottedIds().filter(id => !state.metrics[id] || state.metrics[id].status === 'running' || state.metrics[id].missing);
    if (live.length) { await loadMetrics(live); renderCharts(); }
    if (state.polls % 5 === 0) await loadSweeps();
    state.polls++;
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  } finally { state.busy = false; }
}

function schedule() { setTimeout(async () => { if ($('live').checked) await poll(); schedule(); }, POLL_MS); }

function readForm() {
  const q = state.query;
  q.filter = $('filter').value.trim(); q.sweep = $('sweep').value; q.sort = $('sort').value;
  q.desc = $('desc').checked; q.show = $('show').value.trim(); q.hide = $('hide').value.trim();
  q.all = $('all').checked; q.limit = $('limit').value.trim();
}

async function start() {
  loadHash();
  $('query').addEventListener('submit', e => { e.preventDefault(); readForm(); saveHash(); loadRuns(); });
  for (const id of ['sweep', 'sort', 'desc', 'all']) $(id).addEventListener('change', () => { readForm(); saveHash(); loadRuns(); });
  $('xkey').addEventListener('change', e => { state.xKey = e.target.value; state.zoom = null; saveHash(); renderCharts(); });
  $('logy').addEventListener('change', e => { state.logY = e.target.checked; saveHash(); renderCharts(); });
  $('smooth').addEventListener('input', e => {
    state.smoothing = Number(e.target.value);
    $('smooth-value').textContent = e.target.value;
    saveHash();
    renderCharts();
  });
  $('reset-zoom').addEventListener('click', () => { state.zoom = null; renderCharts(); });
  $('diff-go').addEventListener('click', showDiff);
  window.addEventListener('resize', renderCharts);
  /* the table of this view came with the page (/api/boot.js): drawn now, before the load event */
  const boot = window.loomBoot;
  const booted = boot && boot.reply && tableReply({ ok: boot.status === 200, status: boot.status, data: boot.reply });
  await waited(loadSweeps());
  if (!booted) await waited(loadRuns());
  await refreshCurves();
  window.loomDashboard.ready = true;
  schedule();
}

/* for tests and the browser console */
window.loomDashboard = {
  ready: false,
  state,
  rowCount: () => $('runs').tBodies[0].querySelectorAll('tr[data-run]').length,
  offered: () => [...$('metric-picker').querySelectorAll('input')].map(i => i.dataset.metric),
  loading: () => state.loading > 0,
  plottedRuns: () => plottedIds().slice(),
  plotted: key => charts[key] ? charts[key].plotted.map(s => ({ id: s.id, x: s.x.slice(), y: s.y.slice() })) : null,
  chart: key => charts[key] || null,
  polls: () => state.polls,
};
start();
