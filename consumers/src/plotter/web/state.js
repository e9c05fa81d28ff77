// snapbus plotter: constants, the page's state S, the test hook (window.snapbus), DOM helpers.



export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd',
  '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
// Span choices per x mode: [value, label]; 0 = all held data.
export const SPANS = {
  time: [[10, '10 s'], [30, '30 s'], [120, '2 min'], [600, '10 min'], [0, 'all']],
  step: [[1000, '1,000'], [10000, '10,000'], [100000, '100,000'], [1000000, '1,000,000'], [0, 'all']],
};
export const PREFERRED = ['reward', 'loss', 'value'];
export const X_LABEL_H = 18; // px under the plot area for the x tick labels
export const GUTTER = 62; // px left of the plot area: the y label and the y tick labels
export const RIGHT = 8; // px right of the plot area
export const MAX_DEFAULT_PANELS = 12; // panels the default view opens (the others: in the sidebar)
// Units read from a field name's suffix (rerun's habit: `duration_nanos`, `size_bytes`).
export const UNITS = [[/(_nanos|_ns)$/, 'ns'], [/(_micros|_us)$/, 'µs'], [/(_millis|_ms)$/, 'ms'],
  [/(_secs|_seconds)$/, 's'], [/_bytes$/, 'bytes'], [/_hz$/, 'Hz'], [/(_pct|_percent)$/, '%'],
  [/_deg$/, '°'], [/_rad$/, 'rad']];
export const TIME_STEPS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
  60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

export const S = {
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
export const hook = window.snapbus = {
  connected: false, messages: 0, series: 0, plotted: 0, points: 0, frames: 0,
  lastFrame: null, rate_hz: 0, lost: 0, panels: [], history: false, live: 0, dataTo: null,
  images: [],
};

export const $ = (id) => document.getElementById(id);
export const fin = (v) => typeof v === 'number' && Number.isFinite(v);
export const esc = (v) => String(v).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

// Creates an element with an optional class and text.
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}
