// snapbus plotter: drawing a plot on its canvas: ticks, grid, min/max envelopes, labels.

import { $, GUTTER, RIGHT, S, TIME_STEPS, X_LABEL_H, fin } from './state.js';
import { fmtClock, fmtCount, fmtNum, niceStep } from './format.js';
import { colorOf, setZoom } from './plots.js';
import { reconnect } from './stream.js';

// Ticks [{x, label}] for the x axis over [from, to] on W pixels.
export function xTicks(from, to, W) {
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
export function drawPlot(p) {
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
export function measureWidth() {
  const c = S.plots.length ? S.plots[0].canvas : null;
  const w = Math.round((c && c.clientWidth ? c.clientWidth : $('plots').clientWidth - 2) - GUTTER - RIGHT);
  if (!(w > 0) || Math.min(4000, w) === S.width) return;
  S.width = Math.min(4000, w);
  reconnect();
  for (const p of S.plots) if (p.zoom && !p.zoom.busy) setZoom(p, { from: p.zoom.from, to: p.zoom.to });
}
