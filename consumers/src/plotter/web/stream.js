// snapbus plotter: the live stream (/api/stream as an EventSource): span, connection, messages.

import { S, SPANS, fin, hook } from './state.js';
import { applyStats, loadSeries, updateHook } from './series.js';
import { drawPlot } from './draw.js';
import { fetchFrame } from './images.js';

// The selected span (seconds or samples); 0 = all.
export const spanValue = () => SPANS[S.x][S.spanIdx][0];

// Distinct series ids over all plots.
export const plottedIds = () => [...new Set(S.plots.flatMap((p) => p.ids))];

// How much x the plotted series hold (for span "all"); `to` = newest x seen in the stream.
export function allNeed(to) {
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
export function streamSpan() {
  const v = spanValue();
  const need = allNeed(S.live ? S.live.to : NaN);
  const fit = need > 0 ? Math.ceil(need * 1.25) + 1 : 0;
  if (!v) return fit || SPANS[S.x][1][0];
  return fit && fit < v ? fit : v;
}

// Asks for a (re)connection soon: coalesces bursts, at most one connect per 500 ms.
export function reconnect() {
  clearTimeout(S.connectTimer);
  const wait = Math.max(100, 500 - (performance.now() - S.lastConnect));
  S.connectTimer = setTimeout(() => connect(false), wait);
}

// Opens the EventSource for the current selection (unless the open one already matches).
export function connect(force) {
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
export function setConnected(on) {
  if (on) S.everConnected = true;
  if (hook.connected !== on) { hook.connected = on; updateHook(); }
}

// One stream message: stats always; data and frames unless paused.
export function onMessage(text) {
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
export function parseData(d, from, to) {
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
export function requestRedraw() {
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
