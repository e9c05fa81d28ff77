// snapbus plotter: the page. Plain ES2020, no libraries. Talks to the plotter's HTTP API
// (/api/series, /api/data, /api/frame, /api/stream) and draws min/max envelopes on <canvas>.
'use strict';

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
  '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
// Span choices per x mode: [value, label]; 0 = all held data.
const SPANS = {
  time: [[10, '10 s'], [30, '30 s'], [120, '2 min'], [600, '10 min'], [0, 'all']],
  step: [[1000, '1,000'], [10000, '10,000'], [100000, '100,000'], [1000000, '1,000,000'], [0, 'all']],
};
const PREFERRED = ['reward', 'loss', 'value'];
const X_LABEL_H = 18; // px under the plot area for the x tick labels
const GUTTER = 62; // px left of the plot area: the y label and the y tick labels
const RIGHT = 8; // px right of the plot area
const MAX_DEFAULT_PANELS = 12; // panels the default view opens (the others: in the sidebar)
// Units read from a field name's suffix (rerun's habit: `duration_nanos`, `size_bytes`).
const UNITS = [[/(_nanos|_ns)$/, 'ns'], [/(_micros|_us)$/, 'µs'], [/(_millis|_ms)$/, 'ms'],
  [/(_secs|_seconds)$/, 's'], [/_bytes$/, 'bytes'], [/_hz$/, 'Hz'], [/(_pct|_percent)$/, '%'],
  [/_deg$/, '°'], [/_rad$/, 'rad']];
const TIME_STEPS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
  60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

const S = {
  series: [], byId: new Map(), labels: new Map(), images: [], version: null,
  plots: [], selected: null, nextPlot: 1,
  // auto: the plots follow the default view (a panel per field group, current runs only)
  // until the user changes them; imgAuto: the same for the images.
  auto: true, imgAuto: true, open: new Set(), historyBusy: false,
  x: 'time', spanIdx: 1, paused: false, width: 600,
  // last applied data (the stream's, or the held history before it): {x, from, to, oldest,
  // width, byId: Map(id -> columns), ranges: Map(id -> [from, to]) on the step axis}
  live: null,
  es: null, esUrl: '', esSpan: 0, lastConnect: 0, connectTimer: 0, applyNext: false,
  everConnected: false,
  checkedImages: new Set(), imgViews: new Map(),
  seriesTimer: 0, seriesBusy: false, seriesAgain: false,
  errors: new Map(), rafPending: false, drag: null,
};

// The test hook: kept up to date by updateHook(), requestRedraw() and drawFrame().
// panels: per plot its title, y label, series, y axis range and the range of its data;
// history: the held data was drawn before any live message; live: stream data applied.
const hook = window.snapbus = {
  connected: false, messages: 0, series: 0, plotted: 0, points: 0, frames: 0,
  lastFrame: null, rate_hz: 0, lost: 0, panels: [], history: false, live: 0, dataTo: null,
  images: [],
};

const $ = (id) => document.getElementById(id);
const fin = (v) => typeof v === 'number' && Number.isFinite(v);
const esc = (v) => String(v).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

// Creates an element with an optional class and text.
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

// 1234.5 -> "1.2 kHz".
function fmtRate(hz) {
  if (!fin(hz) || hz <= 0) return '0 Hz';
  if (hz < 1000) return hz.toFixed(hz < 10 ? 1 : 0) + ' Hz';
  return hz < 1e6 ? (hz / 1e3).toFixed(1) + ' kHz' : (hz / 1e6).toFixed(1) + ' MHz';
}

// Integer with thousands separators.
const fmtInt = (n) => (fin(n) ? Math.round(n).toLocaleString('en-US') : '0');

// Epoch seconds -> local "HH:MM:SS" (with fractions when the tick step is below 1 s).
function fmtClock(t, step) {
  if (!fin(t)) return '–';
  const d = new Date(t * 1000);
  const s = [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
  const digits = step < 1 ? Math.min(3, Math.ceil(-Math.log10(step) - 1e-9)) : 0;
  return digits ? s + '.' + String(d.getMilliseconds()).padStart(3, '0').slice(0, digits) : s;
}

// A tick value with as many decimals as its step needs.
function fmtNum(v, step) {
  if (Math.abs(v) < step * 1e-6) v = 0;
  const a = Math.abs(v);
  if (a >= 1e6 || (a > 0 && step < 1e-4)) return v.toExponential(2);
  return v.toFixed(Math.max(0, Math.min(8, -Math.floor(Math.log10(step) + 1e-9))));
}

// Sample numbers: 1234567 -> "1.23457M".
function fmtCount(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return +(v / 1e6).toPrecision(6) + 'M';
  return a >= 1e4 ? +(v / 1e3).toPrecision(6) + 'k' : String(Math.round(v));
}

// A 1-2-5 step giving about n ticks over range.
function niceStep(range, n) {
  const raw = range / Math.max(1, n);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

// Shows (msg) or clears (null) one error source in the header; errors fade after 15 s.
function setError(key, msg) {
  const old = S.errors.get(key);
  if (old) clearTimeout(old.timer);
  if (msg) S.errors.set(key, { msg, timer: setTimeout(() => setError(key, null), 15000) });
  else S.errors.delete(key);
  const text = [...S.errors.values()].map((e) => e.msg).join(' · ');
  const e = $('error');
  e.textContent = e.title = text;
  e.hidden = !text;
}

// GET url as JSON; null (and a header error under key) on any failure. quiet: statuses to ignore.
async function getJSON(url, key, quiet = []) {
  try {
    const r = await fetch(url, { cache: 'no-store' });
    if (quiet.includes(r.status)) return null;
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const j = await r.json();
    setError(key, null);
    return j && typeof j === 'object' ? j : null;
  } catch (err) {
    setError(key, `${key}: ${(err && err.message) || err} (retrying)`);
    return null;
  }
}

// Fetches /api/series (one at a time); retries on failure and while there are no series.
async function loadSeries() {
  clearTimeout(S.seriesTimer);
  if (S.seriesBusy) { S.seriesAgain = true; return; }
  S.seriesBusy = true;
  const j = await getJSON('/api/series', 'series');
  S.seriesBusy = false;
  if (j) applySeries(j);
  if (S.seriesAgain) { S.seriesAgain = false; loadSeries(); return; }
  // Span "all" keeps first/samples fresh to size the stream's span.
  const wait = !j ? 1000 : !S.series.length ? 500 : spanValue() === 0 ? 5000 : 0;
  if (wait) S.seriesTimer = setTimeout(loadSeries, wait);
}

// Takes a /api/series answer: lists, labels, sidebar, and the defaults on first sight.
function applySeries(j) {
  const ok = (s) => s && typeof s === 'object' && fin(s.id);
  S.series = Array.isArray(j.series) ? j.series.filter(ok) : [];
  S.byId = new Map(S.series.map((s) => [s.id, s]));
  S.images = Array.isArray(j.images) ? j.images.filter(ok) : [];
  makeLabels();
  if (j.stats && typeof j.stats === 'object') {
    applyStats(j.stats);
    if (j.stats.version != null) S.version = j.stats.version;
  }
  if (S.auto) defaultLayout();
  if (S.imgAuto) S.checkedImages = new Set(currentOf(S.images).map((im) => im.id));
  renderSidebar();
  S.plots.forEach(renderPlotHead);
  renderImages();
  reconnect();
  if (!S.live) loadHistory();
  requestRedraw();
}

// Until the stream's first message: the held data of the plotted series, from /api/data (so
// a page opened on a running experiment shows its history at once).
async function loadHistory() {
  const ids = plottedIds().filter((id) => (S.byId.get(id) || {}).points > 0);
  if (!ids.length || S.historyBusy) return;
  S.historyBusy = true;
  const x = S.x;
  const span = streamSpan();
  const newest = Math.max(...ids.map((id) => {
    const s = S.byId.get(id);
    return x === 'time' ? s.last : s.samples - 1;
  }).filter(fin));
  const range = span && fin(newest) ? `&from=${newest - span}&to=${newest}` : '';
  const j = await getJSON(`/api/data?ids=${ids.join(',')}&x=${x}${range}&width=${S.width}`, 'history');
  S.historyBusy = false;
  if (!j || S.live || S.x !== x) return;
  S.live = parseData(j);
  hook.history = true;
  requestRedraw();
}

// A run: one process's lane (pid and start time), as the series and images name it.
const runOf = (s) => `${s.pid}@${s.started}`;

// The items (series or images) of the current runs: per schema and producer name, the live
// runs, or if none is live the newest one (so a new run replaces the previous one's view).
function currentOf(items) {
  const runs = new Map(); // schema + producer -> Map(run -> {started, live})
  for (const s of items) {
    const k = `${s.schema}\u0000${s.producer}`;
    if (!runs.has(k)) runs.set(k, new Map());
    runs.get(k).set(runOf(s), { started: fin(s.started) ? s.started : 0, live: s.ended == null });
  }
  const keep = new Set();
  for (const m of runs.values()) {
    const all = [...m.entries()];
    const live = all.filter(([, r]) => r.live);
    const pick = live.length ? live : [all.reduce((a, b) => (b[1].started > a[1].started ? b : a))];
    for (const [run] of pick) keep.add(run);
  }
  return items.filter((s) => keep.has(runOf(s)));
}

// Summary schemas (`*.summary`, from the aggregator) are listed apart and never plotted by default.
const isSummary = (s) => /\.summary$/.test(String(s.schema));

// A field's group: the elements of a short array (`position.0`..) and the per-record
// mean/min/max of a tensor share a panel (one quantity, one unit); others stand alone.
function baseOf(field) {
  const f = String(field);
  const m = /^(.*)\.(mean|min|max)$/.exec(f);
  return m && m[1] ? m[1] : f;
}

// The unit a field's name states, if any ('' if none).
function unitOf(field) {
  const last = String(field).split('.').filter((p) => !/^(\d+|mean|min|max|std|count|last|p\d+)$/.test(p)).pop() || '';
  const u = UNITS.find(([re]) => re.test(last));
  return u ? u[1] : '';
}

// How a panel's y axis is labelled: the field path (of its group) and its unit.
function yLabelOf(ids) {
  const bases = [...new Set(ids.map((id) => S.byId.get(id)).filter(Boolean).map((s) => baseOf(s.field)))];
  const units = [...new Set(bases.map(unitOf))];
  const name = bases.length <= 3 ? bases.join(', ') : `${bases.slice(0, 2).join(', ')}, … (${bases.length} fields)`;
  return units.length === 1 && units[0] ? `${name} [${units[0]}]` : name;
}

// The default view: a panel per (schema, field group) of the current runs, its own y scale;
// preferred fields (reward, loss, value, then names containing them) first.
function defaultLayout() {
  const groups = new Map();
  for (const s of currentOf(S.series.filter((s) => !isSummary(s)))) {
    const base = baseOf(s.field);
    const key = `${s.schema}\u0000${base}`;
    if (!groups.has(key)) groups.set(key, { key, base, schema: s.schema, ids: [], order: groups.size });
    groups.get(key).ids.push(s.id);
  }
  const rank = (g) => {
    const i = PREFERRED.indexOf(g.base);
    if (i >= 0) return i;
    const j = PREFERRED.findIndex((w) => g.base.includes(w));
    return j >= 0 ? PREFERRED.length + j : 2 * PREFERRED.length;
  };
  const chosen = [...groups.values()].sort((a, b) => rank(a) - rank(b) || a.order - b.order)
    .slice(0, MAX_DEFAULT_PANELS);
  const keys = new Set(chosen.map((g) => g.key));
  for (const p of [...S.plots]) if (!keys.has(p.key)) dropPlot(p);
  for (const g of chosen) {
    const p = S.plots.find((q) => q.key === g.key) || addPlot(g.key, false);
    const same = p.ids.length === g.ids.length && p.ids.every((id, i) => id === g.ids[i]);
    if (!same) {
      p.ids = [];
      p.colors = new Map();
      for (const id of g.ids) addToPlot(p, id, false);
    }
    $('plots').append(p.root); // in the chosen order
  }
  S.plots.sort((a, b) => chosen.findIndex((g) => g.key === a.key) - chosen.findIndex((g) => g.key === b.key));
  if (!S.plots.includes(S.selected)) selectPlot(S.plots[0] || null);
  measureWidth();
}

// Back to the default view (after the user changed the plots or the images).
function resetView() {
  S.auto = true;
  S.imgAuto = true;
  for (const p of [...S.plots]) dropPlot(p);
  S.selected = undefined;
  S.nextPlot = 1;
  applySeries({ series: S.series, images: S.images });
}

// Legend names: the field, plus what tells apart series sharing it (schema, else producer).
function makeLabels() {
  const byField = new Map();
  for (const s of S.series) byField.set(s.field, [...(byField.get(s.field) || []), s]);
  S.labels = new Map();
  for (const [field, group] of byField) {
    const distinct = (k) => new Set(group.map(k)).size === group.length;
    const tag = group.length < 2 ? null : distinct((s) => s.schema) ? (s) => s.schema
      : distinct((s) => s.producer) ? (s) => s.producer : distinct((s) => s.pid) ? (s) => `pid ${s.pid}`
        : (s) => `pid ${s.pid} ${fmtStart(s.started)}, ${s.schema}`;
    for (const s of group) S.labels.set(s.id, tag ? `${field} (${tag(s)})` : String(field));
  }
}

// Header counters from a stats object.
function applyStats(st) {
  hook.rate_hz = fin(st.rate_hz) ? st.rate_hz : 0;
  hook.lost = fin(st.lost) ? st.lost : 0;
  $('rate').textContent = fmtRate(hook.rate_hz);
  $('records').textContent = fmtInt(st.records);
  $('lost').textContent = fmtInt(hook.lost);
  $('lostbox').classList.toggle('bad', hook.lost > 0);
}

// Refreshes window.snapbus counts and the connection badge.
function updateHook() {
  hook.series = S.series.length;
  hook.plotted = S.plots.reduce((n, p) => n + p.ids.length, 0);
  const none = $('no-plots');
  none.hidden = S.plots.length > 0;
  none.textContent = S.series.length ? 'no panels: check a field in the sidebar (or click "default view")'
    : 'waiting for data… (nothing has arrived from the subscribed schemas yet)';
  const state = !hook.connected ? (S.everConnected ? 'disconnected' : 'connecting') : S.paused ? 'paused' : 'live';
  $('state').textContent = state;
  $('state').className = 'state ' + state;
}

// Local "HH:MM:SS" of a producer's start (epoch seconds).
const fmtStart = (t) => (fin(t) ? fmtClock(t, 1) : '?');

const seriesTitle = (s) => `${s.schema} · ${s.producer} (pid ${s.pid}, started ${fmtStart(s.started)}` +
  `${s.ended != null ? `, ended ${fmtStart(s.ended)}` : ''}) · ${s.field}`;

// The run a series or image comes from, for labels: "demo · pid 812 · 14:02:11 (ended)".
const runLabel = (s) => `${s.producer} · pid ${s.pid} · ${fmtStart(s.started)}${s.ended != null ? ' (ended)' : ''}`;

// One sidebar row: checkbox, colour swatch, name, a muted note, and (optionally) a button
// that adds the series to the selected panel.
function checkRow(name, note, checked, color, title, onChange, onAdd) {
  const row = el('label', 'item');
  row.title = title;
  const box = el('input');
  box.type = 'checkbox';
  box.checked = checked;
  box.addEventListener('change', () => onChange(box.checked));
  const sw = el('span', 'swatch');
  if (color) sw.style.background = color;
  row.append(box, sw, el('span', 'name', name), el('span', 'where', note));
  if (onAdd) {
    const add = el('button', 'add', '+');
    add.type = 'button';
    add.title = `add to the selected panel (P${S.selected.n}), sharing its y axis`;
    add.addEventListener('click', (ev) => { ev.preventDefault(); onAdd(); });
    row.append(add);
  }
  return row;
}

// A collapsible sidebar section whose open state survives re-rendering.
function section(key, summaryHtml, cls) {
  const d = el('details', cls);
  d.open = S.open.has(key);
  d.addEventListener('toggle', () => { if (d.open) S.open.add(key); else S.open.delete(key); });
  const sm = el('summary');
  sm.innerHTML = summaryHtml;
  d.append(sm);
  return d;
}

// The rows of some series: checked = in a panel; + = add to the selected panel.
function seriesRows(members, name) {
  const sel = S.selected;
  return members.map((s) => {
    const where = S.plots.filter((p) => p.ids.includes(s.id)).map((p) => 'P' + p.n);
    const inSel = !!sel && sel.ids.includes(s.id);
    return checkRow(name(s), where.join(' '), where.length > 0, inSel && colorOf(sel, s.id), seriesTitle(s),
      (checked) => toggleSeries(s.id, checked), sel && !inSel ? () => addToSelected(s.id) : null);
  });
}

// Rebuilds the series list (grouped by schema and run; summary schemas collapsed, by statistic)
// and the image list.
function renderSidebar() {
  const list = $('series-list');
  list.textContent = '';
  if (!S.series.length) list.append(el('p', 'empty', 'waiting for series…'));
  const groups = new Map();
  for (const s of S.series) {
    const key = `${s.schema}\u0000${s.producer}\u0000${runOf(s)}`;
    groups.set(key, [...(groups.get(key) || []), s]);
  }
  const summaries = [];
  for (const [key, members] of groups) {
    const s0 = members[0];
    const head = `<span class="gname">${esc(s0.schema)}</span> <small>${esc(runLabel(s0))}</small>`;
    if (isSummary(s0)) { summaries.push([key, members, head]); continue; }
    const g = el('div', 'sgroup' + (s0.ended != null ? ' ended' : ''));
    const t = el('div', 'gtitle');
    t.innerHTML = head;
    t.title = `${s0.schema} from ${s0.producer} (pid ${s0.pid}, started ${fmtStart(s0.started)})`;
    g.append(t, ...seriesRows(members, (s) => s.field));
    list.append(g);
  }
  if (summaries.length) {
    const n = summaries.reduce((k, [, m]) => k + m.length, 0);
    const all = section('summaries', `Summaries <small>${summaries.length} schema${summaries.length > 1 ? 's' : ''}, ${n} fields</small>`, 'summaries');
    for (const [key, members, head] of summaries) {
      const g = section(key, head, 'sgroup' + (members[0].ended != null ? ' ended' : ''));
      // stats.reward.mean -> under "reward": mean; the window's own fields under "window".
      const byStat = new Map();
      for (const s of members) {
        const m = /^stats\.(.+)\.([^.]+)$/.exec(s.field);
        const k = m ? m[1] : 'window';
        byStat.set(k, [...(byStat.get(k) || []), [s, m ? m[2] : s.field]]);
      }
      for (const [stat, rows] of byStat) {
        const d = section(`${key}\u0000${stat}`, `${esc(stat)} <small>${rows.length}</small>`, 'stat');
        const names = new Map(rows.map(([s, n]) => [s.id, n]));
        d.append(...seriesRows(rows.map(([s]) => s), (s) => names.get(s.id)));
        g.append(d);
      }
      all.append(g);
    }
    list.append(all);
  }
  const ilist = $('image-list');
  ilist.textContent = '';
  if (!S.images.length) ilist.append(el('p', 'empty', 'no image series'));
  for (const im of S.images) {
    const shape = (Array.isArray(im.shape) ? im.shape : []).join('×');
    ilist.append(checkRow(im.field, runLabel(im), S.checkedImages.has(im.id), null,
      `${seriesTitle(im)} [${shape}] ${im.dtype || ''}`, (checked) => {
        S.imgAuto = false;
        if (checked) S.checkedImages.add(im.id); else S.checkedImages.delete(im.id);
        renderImages();
      }));
  }
  updateHook();
}

// Checking a series gives it a panel of its own; unchecking takes it out of every panel.
function toggleSeries(id, on) {
  S.auto = false;
  if (on) {
    const p = addPlot(null, true);
    addToPlot(p, id);
    return;
  }
  for (const p of [...S.plots]) {
    if (!p.ids.includes(id)) continue;
    removeFromPlot(p, id);
    if (!p.ids.length) removePlot(p);
  }
}

// Adds a series to the selected panel: the way to compare fields on one y axis.
function addToSelected(id) {
  if (!S.selected) return;
  S.auto = false;
  addToPlot(S.selected, id);
}

// Adds an empty plot (key: its default-view group, if any) and returns it; selected when the
// user made it.
function addPlot(key, user) {
  const p = { n: S.nextPlot++, key, ids: [], colors: new Map(), zoom: null, zoomToken: 0, view: null, stats: null };
  p.root = el('div', 'plot');
  p.root.innerHTML = `<div class="plot-head"><span class="plot-title"></span><span class="plot-sub"></span>
    <button type="button" class="rm" title="remove this panel">×</button></div>
    <div class="legend"></div><div class="plot-body"><canvas title="drag to zoom; double-click to go back to live">
    </canvas><div class="selbox" hidden></div><div class="badge" hidden></div></div>`;
  [p.title, p.sub, p.legend, p.canvas, p.badge, p.selbox] =
    ['.plot-title', '.plot-sub', '.legend', 'canvas', '.badge', '.selbox'].map((q) => p.root.querySelector(q));
  p.root.querySelector('.rm').addEventListener('click', () => { S.auto = false; removePlot(p); });
  p.legend.addEventListener('click', (ev) => { // the × of a legend entry
    const id = ev.target.dataset && ev.target.dataset.id;
    if (id != null) { S.auto = false; removeFromPlot(p, Number(id)); }
  });
  p.root.addEventListener('mousedown', () => selectPlot(p));
  p.canvas.addEventListener('mousedown', (ev) => startDrag(p, ev));
  p.canvas.addEventListener('dblclick', () => setZoom(p, null));
  $('plots').append(p.root);
  S.plots.push(p);
  if (user) {
    S.auto = false;
    selectPlot(p);
    p.root.scrollIntoView({ block: 'nearest' });
  }
  measureWidth();
  renderPlotHead(p);
  requestRedraw();
  return p;
}

// Takes a plot off the page.
function dropPlot(p) {
  S.plots = S.plots.filter((q) => q !== p);
  p.root.remove();
}

// Removes a plot (its series leave the stream).
function removePlot(p) {
  dropPlot(p);
  const next = S.selected !== p ? S.selected : S.plots[S.plots.length - 1] || null;
  S.selected = undefined; // so that selectPlot redraws the sidebar
  selectPlot(next);
  reconnect();
  requestRedraw();
}

// Makes p the plot that the sidebar's + buttons add to.
function selectPlot(p) {
  if (S.selected === p && p) return;
  S.selected = p;
  for (const q of S.plots) q.root.classList.toggle('selected', q === p);
  renderSidebar();
}

// The colour of series id in plot p.
const colorOf = (p, id) => PALETTE[(p.colors.get(id) || 0) % PALETTE.length];

// Adds series id to plot p with the first colour not used there (changed: false while the
// default view is being built, which redraws once at the end).
function addToPlot(p, id, changed = true) {
  if (p.ids.includes(id)) return;
  const used = new Set(p.colors.values());
  let c = 0;
  while (used.has(c)) c++;
  p.ids.push(id);
  p.colors.set(id, c);
  if (changed) plotChanged(p);
}

// Removes series id from plot p.
function removeFromPlot(p, id) {
  p.ids = p.ids.filter((x) => x !== id);
  p.colors.delete(id);
  plotChanged(p);
}

// After a plot's series changed: legend, sidebar, stream, zoomed data.
function plotChanged(p) {
  renderPlotHead(p);
  renderSidebar();
  if (p.zoom) setZoom(p, p.ids.length ? { from: p.zoom.from, to: p.zoom.to } : null);
  reconnect();
  if (!S.live) loadHistory();
  requestRedraw();
}

// The plot's title (its field group), where its data comes from, its legend (a wrapping list,
// each entry removable; none for a single series) and its "zoomed" badge.
function renderPlotHead(p) {
  const list = p.ids.map((id) => S.byId.get(id)).filter(Boolean);
  const schemas = [...new Set(list.map((s) => s.schema))];
  const runs = [...new Set(list.map(runLabel))];
  p.yLabel = list.length ? yLabelOf(p.ids) : '';
  p.title.textContent = list.length ? p.yLabel : `Plot ${p.n}`;
  p.sub.textContent = list.length ? `P${p.n} · ${schemas.join(', ')}${runs.length === 1 ? ' · ' + runs[0] : ''}` : `P${p.n}`;
  p.sub.title = [...schemas, ...runs].join('\n');
  const legend = p.ids.length > 1 || (p.ids.length === 1 && S.byId.get(p.ids[0]) &&
    baseOf(S.byId.get(p.ids[0]).field) !== S.byId.get(p.ids[0]).field);
  p.legend.hidden = !legend && p.ids.length > 0;
  p.legend.innerHTML = p.ids.map((id) => {
    const s = S.byId.get(id);
    return `<span class="entry" title="${esc(s ? seriesTitle(s) : 'series ' + id)}"><span class="swatch" ` +
      `style="background:${colorOf(p, id)}"></span>${esc(S.labels.get(id) || '#' + id)}` +
      `<span class="x" data-id="${id}" title="remove from this panel">×</span></span>`;
  }).join('') || '<span class="hint">select this panel, then + series in the sidebar</span>';
  p.badge.hidden = !p.zoom;
  p.badge.textContent = p.zoom && p.zoom.busy ? 'zooming…' : 'zoomed';
}

// Zooms plot p to {from, to} (fetching /api/data for its series), or back to live with null.
async function setZoom(p, range) {
  const token = ++p.zoomToken;
  p.zoom = range && p.ids.length ? { ...range, busy: true, data: p.zoom ? p.zoom.data : null } : null;
  renderPlotHead(p);
  requestRedraw();
  if (!p.zoom) return;
  const { from, to } = range;
  const q = `ids=${p.ids.join(',')}&x=${S.x}&from=${from}&to=${to}&width=${S.width}`;
  const j = await getJSON('/api/data?' + q, 'zoom');
  if (token !== p.zoomToken) return; // superseded
  if (j) p.zoom = { from, to, busy: false, data: parseData(j, from, to) };
  else if (!p.zoom.data) p.zoom = null;
  else p.zoom.busy = false;
  renderPlotHead(p);
  requestRedraw();
}

// Mouse down on a plot: start selecting an x range.
function startDrag(p, ev) {
  if (ev.button !== 0 || !p.view) return;
  const r = p.canvas.getBoundingClientRect();
  const left = r.left + GUTTER;
  const x = Math.max(0, Math.min(r.width - GUTTER - RIGHT, ev.clientX - left));
  S.drag = { p, left, w: r.width - GUTTER - RIGHT, x0: x, x1: x };
  ev.preventDefault();
}

// Mouse move while selecting: shows the selection box.
function moveDrag(ev) {
  const d = S.drag;
  if (!d) return;
  d.x1 = Math.max(0, Math.min(d.w, ev.clientX - d.left));
  d.p.selbox.hidden = Math.abs(d.x1 - d.x0) < 2;
  d.p.selbox.style.left = GUTTER + Math.min(d.x0, d.x1) + 'px';
  d.p.selbox.style.width = Math.abs(d.x1 - d.x0) + 'px';
}

// Mouse up: zoom the plot to the selected x range (at least 5 px wide).
function endDrag() {
  const d = S.drag;
  S.drag = null;
  if (d) d.p.selbox.hidden = true;
  const v = d && d.p.view;
  if (!v || Math.abs(d.x1 - d.x0) < 5) return;
  const at = (px) => v.from + (px / d.w) * (v.to - v.from);
  let from = at(Math.min(d.x0, d.x1));
  let to = at(Math.max(d.x0, d.x1));
  if (S.x === 'step') { from = Math.floor(from); to = Math.ceil(to); }
  if (to > from) setZoom(d.p, { from, to });
}

// The selected span (seconds or samples); 0 = all.
const spanValue = () => SPANS[S.x][S.spanIdx][0];

// Distinct series ids over all plots.
const plottedIds = () => [...new Set(S.plots.flatMap((p) => p.ids))];

// How much x the plotted series hold (for span "all"); `to` = newest x seen in the stream.
function allNeed(to) {
  let start = Infinity;
  let end = -Infinity;
  for (const s of plottedIds().map((id) => S.byId.get(id)).filter(Boolean)) {
    if (S.x === 'time') {
      if (fin(s.first)) start = Math.min(start, s.first);
      if (fin(s.last)) end = Math.max(end, s.last);
    } else if (fin(s.samples) && s.samples > 0) {
      start = Math.min(start, s.samples - (fin(s.points) ? s.points : s.samples));
      end = Math.max(end, s.samples - 1);
    }
  }
  if (fin(to)) end = Math.max(end, to);
  return end > start ? end - start : 0;
}

// The span to ask the stream for: the held range plus 25 % for "all", and also while the
// data held is shorter than the chosen span (a plotter attached late holds the ring's few
// seconds: its columns then cover those seconds, not the empty rest of the span).
function streamSpan() {
  const v = spanValue();
  const need = allNeed(S.live ? S.live.to : NaN);
  const fit = need > 0 ? Math.ceil(need * 1.25) + 1 : 0;
  if (!v) return fit || SPANS[S.x][1][0];
  return fit && fit < v ? fit : v;
}

// Asks for a (re)connection soon: coalesces bursts, at most one connect per 500 ms.
function reconnect() {
  clearTimeout(S.connectTimer);
  const wait = Math.max(100, 500 - (performance.now() - S.lastConnect));
  S.connectTimer = setTimeout(() => connect(false), wait);
}

// Opens the EventSource for the current selection (unless the open one already matches).
function connect(force) {
  const ids = plottedIds();
  const span = streamSpan();
  const url = `/api/stream?${ids.length ? `ids=${ids.join(',')}&` : ''}x=${S.x}` +
    `&span=${span}&width=${S.width}`;
  if (!force && S.es && S.esUrl === url && S.es.readyState !== EventSource.CLOSED) return;
  if (S.es) S.es.close();
  S.lastConnect = performance.now();
  S.esUrl = url;
  S.esSpan = span;
  S.applyNext = true; // show the new selection once even when paused
  const es = new EventSource(url);
  S.es = es;
  es.onopen = () => { if (es === S.es) setConnected(true); };
  es.onmessage = (ev) => { if (es === S.es) onMessage(ev.data); };
  es.onerror = () => {
    if (es !== S.es) return;
    setConnected(false);
    // EventSource retries by itself, unless the server refused (then it is CLOSED).
    if (es.readyState === EventSource.CLOSED) setTimeout(() => { if (es === S.es) connect(true); }, 2000);
  };
}

// Connection state for the header and the hook.
function setConnected(on) {
  if (on) S.everConnected = true;
  if (hook.connected !== on) { hook.connected = on; updateHook(); }
}

// One stream message: stats always; data and frames unless paused.
function onMessage(text) {
  let msg;
  try { msg = JSON.parse(text); } catch (e) { return; }
  if (!msg || typeof msg !== 'object') return;
  hook.messages++;
  setConnected(true);
  const st = msg.stats;
  if (st && typeof st === 'object') {
    applyStats(st);
    if (st.version != null && st.version !== S.version) {
      S.version = st.version;
      loadSeries();
    }
  }
  const d = msg.data;
  if (d && typeof d === 'object' && d.x === S.x && (!S.paused || S.applyNext)) {
    S.applyNext = false;
    S.live = parseData(d);
    hook.live++;
    requestRedraw();
    // Follow the growing held range up to the chosen span (for "all": also a shrinking one).
    const v = spanValue();
    const need = allNeed(S.live.to);
    if ((need > S.esSpan && (!v || S.esSpan < v)) || (!v && need * 1.25 + 1 < S.esSpan * 0.5)) reconnect();
  }
  const frames = msg.frames;
  if (!S.paused && frames && typeof frames === 'object') {
    for (const [id, v] of S.imgViews) {
      if (frames[id] != null && frames[id] !== v.seq) fetchFrame(id);
    }
  }
  updateHook();
}

// A /api/data object -> {x, from, to, width, byId}, dropping malformed columns.
function parseData(d, from, to) {
  const byId = new Map();
  const ranges = new Map(); // step axis, live: each series' own window of sample numbers
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of Array.isArray(d.series) ? d.series : []) {
    if (!s || !fin(s.id)) continue;
    const cols = (Array.isArray(s.columns) ? s.columns : [])
      .filter((c) => Array.isArray(c) && fin(c[0]) && fin(c[1]) && fin(c[2]));
    if (cols.length) { lo = Math.min(lo, cols[0][0]); hi = Math.max(hi, cols[cols.length - 1][0]); }
    byId.set(s.id, cols);
    if (fin(s.from) && fin(s.to)) ranges.set(s.id, [s.from, s.to]);
  }
  from = fin(d.from) ? d.from : fin(from) ? from : lo;
  to = fin(d.to) ? d.to : fin(to) ? to : hi;
  return { x: d.x, from, to, oldest: lo, width: fin(d.width) && d.width > 0 ? d.width : S.width, byId, ranges };
}

// Schedules one redraw of all plots on the next animation frame.
function requestRedraw() {
  if (S.rafPending) return;
  S.rafPending = true;
  requestAnimationFrame(() => {
    S.rafPending = false;
    hook.points = S.plots.reduce((n, p) => n + drawPlot(p), 0);
    hook.panels = S.plots.map((p) => ({
      n: p.n, title: p.title.textContent, yLabel: p.yLabel || '', ids: [...p.ids],
      fields: p.ids.map((id) => (S.byId.get(id) || {}).field),
      schemas: [...new Set(p.ids.map((id) => (S.byId.get(id) || {}).schema))],
      pids: [...new Set(p.ids.map((id) => (S.byId.get(id) || {}).pid))],
      note: p.note || null,
      ...(p.stats || { columns: 0 }),
    }));
    hook.dataTo = S.live && fin(S.live.to) ? S.live.to : null;
    updateHook();
  });
}

// Ticks [{x, label}] for the x axis over [from, to] on W pixels.
function xTicks(from, to, W) {
  const time = S.x === 'time';
  const step = time ? TIME_STEPS.find((s) => (to - from) / s <= W / 110) || 86400
    : Math.max(1, niceStep(to - from, W / 90));
  const off = time ? -new Date(from * 1000).getTimezoneOffset() * 60 : 0; // align to local time
  const first = Math.ceil((from + off) / step) * step - off;
  const out = [];
  for (let k = 0, x = first; x <= to && k < 200; x = first + ++k * step) {
    out.push({ x, label: time ? fmtClock(x, step) : fmtCount(x) });
  }
  return out;
}

// Draws plot p (y label, grid, envelopes, midpoint lines, tick labels) with its own y scale
// (from its own series' visible data); returns the columns drawn.
function drawPlot(p) {
  const c = p.canvas;
  const W = c.clientWidth;
  const H = c.clientHeight;
  p.stats = null;
  p.note = null;
  if (!W || !H) return 0;
  const dpr = window.devicePixelRatio || 1;
  if (c.width !== Math.round(W * dpr)) c.width = Math.round(W * dpr);
  if (c.height !== Math.round(H * dpr)) c.height = Math.round(H * dpr);
  const ctx = c.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  ctx.font = '11px system-ui, sans-serif';
  const PW = W - GUTTER - RIGHT; // plot area width (one column per pixel)
  const PH = H - X_LABEL_H; // plot area height
  ctx.fillStyle = '#c4cad2';
  ctx.fillRect(GUTTER, PH, PW, 1);
  ctx.fillRect(GUTTER, 0, 1, PH);
  // the y label: the field (group) and its unit, along the axis
  if (p.yLabel) {
    ctx.save();
    ctx.fillStyle = '#4b5563';
    ctx.font = '600 11px system-ui, sans-serif';
    ctx.translate(11, PH / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    let label = p.yLabel;
    while (label.length > 4 && ctx.measureText(label).width > PH - 8) label = label.slice(0, -2);
    ctx.fillText(label === p.yLabel ? label : label + '…', 0, 0);
    ctx.restore();
  }
  const note = (text) => {
    ctx.fillStyle = '#8a929c';
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    ctx.fillText(text, GUTTER + PW / 2, PH / 2);
    p.view = null;
    p.note = text;
    return 0;
  };
  const src = p.zoom ? p.zoom.data : S.live;
  if (!p.ids.length) return note('empty panel: select it, then + series in the sidebar');
  // "waiting for data…" only while none of its series has any point
  const held = p.ids.some((id) => (S.byId.get(id) || {}).points > 0);
  if (!src) return note(p.zoom ? 'loading…' : !held ? 'waiting for data…' : S.paused ? 'paused' : 'loading…');
  const cols = p.ids.map((id) => src.byId.get(id) || []);
  let { from, to } = src;
  let oldest = src.oldest;
  let srcSpan = src.to - src.from;
  // Step axis, live: sample numbers count per series, so a plot's x is its series' own window.
  const own = p.zoom ? [] : p.ids.map((id) => src.ranges && src.ranges.get(id)).filter(Boolean);
  if (own.length) {
    from = Math.min(...own.map((r) => r[0]));
    to = Math.max(...own.map((r) => r[1]));
    srcSpan = own[0][1] - own[0][0];
    oldest = Math.min(...cols.map((cs) => (cs.length ? cs[0][0] : Infinity)));
  }
  // Live, when the data held is shorter than the span (or "all", whose span has headroom):
  // the x axis starts at the oldest data (of any plot, so that time axes line up).
  if (!p.zoom && fin(oldest) && oldest > from && oldest < to) from = oldest;
  if (!fin(from) || !fin(to)) return note(held ? 'loading…' : 'waiting for data…');
  if (!(to > from)) { from -= 0.5; to += 0.5; }
  p.view = { from, to };
  const sx = PW / (to - from);
  const X = (x) => GUTTER + (x - from) * sx;
  const colPx = Math.max(1, (srcSpan / src.width) * sx); // one column's width
  const visible = (col) => col[0] >= from && col[0] <= to;
  // y autoscale over this plot's visible columns, 5 % margin
  let lo = Infinity;
  let hi = -Infinity;
  for (const cs of cols) {
    for (const col of cs) if (visible(col)) { lo = Math.min(lo, col[1]); hi = Math.max(hi, col[2]); }
  }
  if (!fin(lo) || !fin(hi)) return note(held ? 'no data in this range' : 'waiting for data…');
  const dataMin = lo;
  const dataMax = hi;
  const pad = hi - lo > Math.abs(hi) * 1e-12 ? (hi - lo) * 0.05 : Math.abs(lo) * 0.1 || 1;
  lo -= pad;
  hi += pad;
  const yOf = (v) => 6 + ((hi - v) / (hi - lo)) * (PH - 10);
  // grid
  const ystep = niceStep(hi - lo, Math.max(2, PH / 36));
  const yt = [];
  for (let k = 0, y0 = Math.ceil(lo / ystep) * ystep, v = y0; v <= hi && k < 50; v = y0 + ++k * ystep) yt.push(v);
  const xt = xTicks(from, to, PW);
  ctx.fillStyle = '#eef0f3';
  for (const v of yt) ctx.fillRect(GUTTER + 1, Math.round(yOf(v)), PW, 1);
  for (const t of xt) ctx.fillRect(Math.round(X(t.x)), 0, 1, PH);
  // series: the envelope (min..max per column), then a line through the midpoints of the
  // thin columns (where a column holds a wide range, its band is what there is to see)
  let drawn = 0;
  ctx.save();
  ctx.beginPath();
  ctx.rect(GUTTER + 1, 0, PW, PH);
  ctx.clip();
  p.ids.forEach((id, i) => {
    const cs = cols[i].filter(visible);
    ctx.fillStyle = ctx.strokeStyle = colorOf(p, id);
    ctx.globalAlpha = 0.4;
    for (const col of cs) {
      const y1 = yOf(col[2]);
      ctx.fillRect(X(col[0]), y1, colPx, Math.max(1, yOf(col[1]) - y1));
    }
    ctx.globalAlpha = 1;
    ctx.lineWidth = 1.25;
    ctx.beginPath();
    let joined = false;
    for (const col of cs) {
      const thin = yOf(col[1]) - yOf(col[2]) < 3;
      const x = X(col[0]) + colPx / 2;
      const y = yOf((col[1] + col[2]) / 2);
      if (thin && joined) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      joined = thin;
    }
    ctx.stroke();
    drawn += cs.length;
  });
  ctx.restore();
  // tick labels: y right-aligned left of the axis, x underneath
  ctx.fillStyle = '#4b5563';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  for (const v of yt) {
    const y = yOf(v);
    if (y < 5 || y > PH - 3) continue;
    ctx.fillText(fmtNum(v, ystep), GUTTER - 4, y);
  }
  ctx.textAlign = 'left';
  ctx.textBaseline = 'top';
  for (const t of xt) {
    const w = ctx.measureText(t.label).width;
    ctx.fillText(t.label, Math.max(GUTTER, Math.min(W - w, X(t.x) - w / 2)), PH + 4);
  }
  p.stats = { yMin: lo, yMax: hi, dataMin, dataMax, columns: drawn };
  return drawn;
}

// The plots' CSS pixel width (= columns asked of the server); reconnects when it changes.
function measureWidth() {
  const c = S.plots.length ? S.plots[0].canvas : null;
  const w = Math.round((c && c.clientWidth ? c.clientWidth : $('plots').clientWidth - 2) - GUTTER - RIGHT);
  if (!(w > 0) || Math.min(4000, w) === S.width) return;
  S.width = Math.min(4000, w);
  reconnect();
  for (const p of S.plots) if (p.zoom && !p.zoom.busy) setZoom(p, { from: p.zoom.from, to: p.zoom.to });
}

// Creates/removes one card per checked image series.
function renderImages() {
  const known = new Map(S.images.map((im) => [im.id, im]));
  for (const [id, v] of S.imgViews) {
    if (!S.checkedImages.has(id)) { v.card.remove(); S.imgViews.delete(id); }
  }
  for (const id of S.checkedImages) {
    const im = known.get(id);
    if (!im) continue;
    if (!S.imgViews.has(id)) {
      const card = el('div', 'imgcard');
      card.innerHTML = '<div class="ititle"></div><div class="irun"></div>' +
        '<canvas width="1" height="1"></canvas><div class="icap">waiting for a frame…</div>';
      $('images').append(card);
      const [title, run, canvas, cap] = ['.ititle', '.irun', 'canvas', '.icap'].map((q) => card.querySelector(q));
      S.imgViews.set(id, { card, title, run, canvas, cap, seq: undefined, busy: false });
      fetchFrame(id);
    }
    // Labelled with its run (producer, pid, start); marked when that run has ended.
    const v = S.imgViews.get(id);
    const ended = im.ended != null;
    v.card.title = seriesTitle(im);
    v.card.classList.toggle('ended', ended);
    v.title.textContent = `${im.schema} · ${im.field}`;
    v.run.innerHTML = `${esc(im.producer)} · pid ${esc(im.pid)} · started ${esc(fmtStart(im.started))}` +
      (ended ? ` <span class="tag">ended ${esc(fmtStart(im.ended))}</span>` : ' <span class="tag live">live</span>');
  }
  hook.images = [...S.imgViews.keys()].map((id) => {
    const im = known.get(id) || {};
    return { id, pid: im.pid, started: im.started, ended: im.ended, field: im.field };
  });
}

// Fetches the latest frame of image series id (one request at a time per image).
async function fetchFrame(id) {
  const v = S.imgViews.get(id);
  if (!v || v.busy) return;
  v.busy = true;
  const j = await getJSON(`/api/frame?id=${id}`, 'frame', [404]); // 404: no frame yet
  v.busy = false;
  if (j && S.imgViews.get(id) === v) drawFrame(id, v, j);
}

// Draws a frame (row-major 0..255, 1/3/4 channels) scaled up with nearest neighbour.
function drawFrame(id, v, j) {
  const shape = Array.isArray(j.shape) ? j.shape.filter(fin) : [];
  const h = shape.length >= 2 ? shape[0] : 1;
  const w = shape.length >= 2 ? shape[1] : shape[0] || 0;
  const ch = [1, 3, 4].includes(j.channels) ? j.channels : 1;
  const data = Array.isArray(j.data) ? j.data : [];
  if (!(h > 0 && w > 0) || h * w > 4e6) return;
  const c = v.canvas;
  if (c.width !== w || c.height !== h) {
    c.width = w;
    c.height = h;
    const scale = Math.max(1, Math.floor(256 / Math.max(w, h)));
    c.style.width = w * scale + 'px';
    c.style.height = h * scale + 'px';
  }
  const ctx = c.getContext('2d');
  const img = ctx.createImageData(w, h);
  const px = img.data; // missing values become 0 (Uint8ClampedArray)
  for (let i = 0, n = w * h; i < n; i++) {
    const o = i * ch;
    px[i * 4] = data[o];
    px[i * 4 + 1] = ch === 1 ? data[o] : data[o + 1];
    px[i * 4 + 2] = ch === 1 ? data[o] : data[o + 2];
    px[i * 4 + 3] = ch === 4 ? data[o + 3] : 255;
  }
  ctx.putImageData(img, 0, 0);
  v.seq = j.seq;
  v.cap.textContent = `${shape.join('×')} · frame ${j.seq} · ${fmtClock(j.t, 0.001)}`;
  hook.frames++;
  hook.lastFrame = { id: fin(j.id) ? j.id : id, seq: j.seq, shape };
}

// Fills the span selector with the current mode's labels.
function renderSpanOptions() {
  $('span').innerHTML = SPANS[S.x].map(([, label], i) => `<option value="${i}">${label}</option>`).join('');
  $('span').value = String(S.spanIdx);
}

// Switches the x axis (zooms are dropped: their ranges were in the other unit).
function setXMode(mode) {
  if (S.x === mode) return;
  S.x = mode;
  for (const m of ['time', 'step']) {
    $('x-' + m).classList.toggle('on', m === mode);
    $('x-' + m).setAttribute('aria-pressed', String(m === mode));
  }
  for (const p of S.plots) { p.zoomToken++; p.zoom = null; renderPlotHead(p); }
  S.live = null;
  renderSpanOptions();
  if (spanValue() === 0) loadSeries();
  reconnect();
  requestRedraw();
}

// Pause (freeze the plots and images; the header stats keep updating) or resume.
function togglePause() {
  S.paused = !S.paused;
  $('pause').textContent = S.paused ? 'Resume' : 'Pause';
  $('pause').classList.toggle('on', S.paused);
  updateHook();
}

// Wires the controls and starts loading.
function init() {
  renderSpanOptions();
  $('x-time').addEventListener('click', () => setXMode('time'));
  $('x-step').addEventListener('click', () => setXMode('step'));
  $('span').addEventListener('change', (ev) => {
    S.spanIdx = Number(ev.target.value) || 0;
    if (spanValue() === 0) loadSeries();
    reconnect();
  });
  $('pause').addEventListener('click', togglePause);
  $('add-plot').addEventListener('click', () => addPlot(null, true));
  $('reset-view').addEventListener('click', resetView);
  window.addEventListener('mousemove', moveDrag);
  window.addEventListener('mouseup', endDrag);
  new ResizeObserver(() => { measureWidth(); requestRedraw(); }).observe($('plots'));
  updateHook();
  loadSeries();
  reconnect();
}

init();
