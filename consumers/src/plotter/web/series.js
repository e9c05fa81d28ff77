// snapbus plotter: the series list from /api/series, the held history, and the default view.

import { $, MAX_DEFAULT_PANELS, PREFERRED, S, UNITS, fin, hook } from './state.js';
import { fmtClock, fmtInt, fmtRate } from './format.js';
import { renderSidebar } from './sidebar.js';
import { addPlot, addToPlot, dropPlot, renderPlotHead, selectPlot } from './plots.js';
import {
  parseData,
  plottedIds,
  reconnect,
  requestRedraw,
  spanValue,
  streamSpan,
} from './stream.js';
import { measureWidth } from './draw.js';
import { renderImages } from './images.js';

// Shows (msg) or clears (null) one error source in the header; errors fade after 15 s.
export function setError(key, msg) {
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
export async function getJSON(url, key, quiet = []) {
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
export async function loadSeries() {
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
export function applySeries(j) {
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
export async function loadHistory() {
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
export const runOf = (s) => `${s.pid}@${s.started}`;

// The items (series or images) of the current runs: per schema and producer name, the live
// runs, or if none is live the newest one (so a new run replaces the previous one's view).
export function currentOf(items) {
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
export const isSummary = (s) => /\.summary$/.test(String(s.schema));

// A field's group: the elements of a short array (`position.0`..) and the per-record
// mean/min/max of a tensor share a panel (one quantity, one unit); others stand alone.
export function baseOf(field) {
  const f = String(field);
  const m = /^(.*)\.(mean|min|max)$/.exec(f);
  return m && m[1] ? m[1] : f;
}

// The unit a field's name states, if any ('' if none).
export function unitOf(field) {
  const last = String(field).split('.').filter((p) => !/^(\d+|mean|min|max|std|count|last|p\d+)$/.test(p)).pop() || '';
  const u = UNITS.find(([re]) => re.test(last));
  return u ? u[1] : '';
}

// How a panel's y axis is labelled: the field path (of its group) and its unit.
export function yLabelOf(ids) {
  const bases = [...new Set(ids.map((id) => S.byId.get(id)).filter(Boolean).map((s) => baseOf(s.field)))];
  const units = [...new Set(bases.map(unitOf))];
  const name = bases.length <= 3 ? bases.join(', ') : `${bases.slice(0, 2).join(', ')}, … (${bases.length} fields)`;
  return units.length === 1 && units[0] ? `${name} [${units[0]}]` : name;
}

// The default view: a panel per (schema, field group) of the current runs, its own y scale;
// preferred fields (reward, loss, value, then names containing them) first.
export function defaultLayout() {
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
export function resetView() {
  S.auto = true;
  S.imgAuto = true;
  for (const p of [...S.plots]) dropPlot(p);
  S.selected = undefined;
  S.nextPlot = 1;
  applySeries({ series: S.series, images: S.images });
}

// Legend names: the field, plus what tells apart series sharing it (schema, else producer).
export function makeLabels() {
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
export function applyStats(st) {
  hook.rate_hz = fin(st.rate_hz) ? st.rate_hz : 0;
  hook.lost = fin(st.lost) ? st.lost : 0;
  $('rate').textContent = fmtRate(hook.rate_hz);
  $('records').textContent = fmtInt(st.records);
  $('lost').textContent = fmtInt(hook.lost);
  $('lostbox').classList.toggle('bad', hook.lost > 0);
  const leaves = fin(st.cut_leaves) ? st.cut_leaves : 0;
  const values = fin(st.cut_dynamic_values) ? st.cut_dynamic_values : 0;
  hook.cut = { leaves, dynamic_values: values };
  $('cutbox').hidden = leaves === 0 && values === 0;
  $('cut').textContent = `${fmtInt(leaves)} leaves, ${fmtInt(values)} dynamic values`;
}

// Refreshes window.snapbus counts and the connection badge.
export function updateHook() {
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
export const fmtStart = (t) => (fin(t) ? fmtClock(t, 1) : '?');

export const seriesTitle = (s) => `${s.schema} · ${s.producer} (pid ${s.pid}, started ${fmtStart(s.started)}` +
  `${s.ended != null ? `, ended ${fmtStart(s.ended)}` : ''}) · ${s.field}`;

// The run a series or image comes from, for labels: "demo · pid 812 · 14:02:11 (ended)".
export const runLabel = (s) => `${s.producer} · pid ${s.pid} · ${fmtStart(s.started)}${s.ended != null ? ' (ended)' : ''}`;
