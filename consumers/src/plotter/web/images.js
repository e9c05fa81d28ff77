// snapbus plotter: image series: one card per checked tensor view, its latest frame drawn:
// an image scaled up, points from above (x right, y up, coloured by z), a series over its index.

import { $, S, el, esc, fin, hook } from './state.js';
import { fmtClock } from './format.js';
import { fmtStart, getJSON, seriesTitle } from './series.js';

// Creates/removes one card per checked image series.
export function renderImages() {
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
      S.imgViews.set(id, { card, title, run, canvas, cap, seq: undefined });
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

// Fetches the latest frame of image series id. One request at a time for all cards, the
// others queued (each card at most once): a page of many cards would otherwise hold every
// connection the browser allows to the server, and the stream and the plots would wait.
const frameQueue = new Set();
let frameBusy = false;
export async function fetchFrame(id) {
  frameQueue.add(id);
  if (frameBusy) return;
  frameBusy = true;
  while (frameQueue.size) {
    const [next] = frameQueue;
    frameQueue.delete(next);
    const v = S.imgViews.get(next);
    if (!v) continue;
    const j = await getJSON(`/api/frame?id=${next}`, 'frame', [404]); // 404: no frame yet
    if (j && S.imgViews.get(next) === v) drawFrame(next, v, j);
  }
  frameBusy = false;
}

// Draws a frame as its kind says.
export function drawFrame(id, v, j) {
  const values = Array.isArray(j.values) ? j.values.map(Number) : [];
  const shape = Array.isArray(j.shape) ? j.shape.filter(fin) : [];
  let what = shape.join('×');
  if (j.kind === 'points' || j.kind === 'series') {
    const n = j.kind === 'points' ? Math.floor(values.length / 3) : values.length;
    if (!(n > 0)) return;
    (j.kind === 'points' ? drawPoints : drawProfile)(v.canvas, values, n);
    what = j.kind === 'points' ? `${n} points (x, y; colour: z)` : `${n} values`;
  } else if (!drawPixels(v.canvas, j)) {
    return;
  }
  v.cap.textContent = `${what} · frame ${j.seq} · ${fmtClock(j.t, 0.001)}`;
  v.seq = j.seq;
  hook.frames++;
  hook.lastFrame = { id: fin(j.id) ? j.id : id, seq: j.seq, shape, kind: j.kind || 'image' };
}

const SIDE = 256;

// A square canvas of SIDE css pixels, cleared; its context.
function plainCanvas(c) {
  if (c.width !== SIDE || c.height !== SIDE) {
    c.width = SIDE;
    c.height = SIDE;
    c.style.width = SIDE + 'px';
    c.style.height = SIDE + 'px';
  }
  const ctx = c.getContext('2d');
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, SIDE, SIDE);
  return ctx;
}

// [lo, hi] of finite xs (a unit span when they are all equal).
function range(xs) {
  let lo = Infinity, hi = -Infinity;
  for (const x of xs) if (Number.isFinite(x)) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
  if (!(hi >= lo)) return [0, 1];
  return hi > lo ? [lo, hi] : [lo - 0.5, hi + 0.5];
}

// Points seen from above: x right, y up (one scale for both), z from blue (low) to red.
function drawPoints(c, vals, n) {
  const ctx = plainCanvas(c);
  const xs = [], ys = [], zs = [];
  for (let i = 0; i < n; i++) { xs.push(vals[3 * i]); ys.push(vals[3 * i + 1]); zs.push(vals[3 * i + 2]); }
  const [x0, x1] = range(xs), [y0, y1] = range(ys), [z0, z1] = range(zs);
  const span = Math.max(x1 - x0, y1 - y0), pad = 8, k = (SIDE - 2 * pad) / span;
  for (let i = 0; i < n; i++) {
    if (![xs[i], ys[i]].every(Number.isFinite)) continue;
    const z = Number.isFinite(zs[i]) ? (zs[i] - z0) / (z1 - z0) : 0;
    ctx.fillStyle = `rgb(${Math.round(255 * z)},60,${Math.round(255 * (1 - z))})`;
    ctx.fillRect(pad + (xs[i] - x0) * k - 1.5, SIDE - pad - (ys[i] - y0) * k - 1.5, 3, 3);
  }
}

// A series over its index: a line, its min and max written.
function drawProfile(c, vals, n) {
  const ctx = plainCanvas(c);
  const [lo, hi] = range(vals), pad = 14;
  ctx.strokeStyle = '#1f77b4';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let pen = false;
  for (let i = 0; i < n; i++) {
    if (!Number.isFinite(vals[i])) { pen = false; continue; }
    const x = pad + (n > 1 ? i / (n - 1) : 0.5) * (SIDE - 2 * pad);
    const y = SIDE - pad - (vals[i] - lo) / (hi - lo) * (SIDE - 2 * pad);
    if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    pen = true;
  }
  ctx.stroke();
  ctx.fillStyle = '#555';
  ctx.font = '11px sans-serif';
  ctx.fillText(String(hi), 2, 11);
  ctx.fillText(String(lo), 2, SIDE - 3);
}

// Draws an image (row-major 0..255, 1/3/4 channels) scaled up with nearest neighbour; false
// when the frame has no pixels to draw.
function drawPixels(c, j) {
  const shape = Array.isArray(j.shape) ? j.shape.filter(fin) : [];
  const h = shape.length >= 2 ? shape[0] : 1;
  const w = shape.length >= 2 ? shape[1] : shape[0] || 0;
  const ch = [1, 3, 4].includes(j.channels) ? j.channels : 1;
  const data = Array.isArray(j.data) ? j.data : [];
  if (!(h > 0 && w > 0) || h * w > 4e6) return false;
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
  return true;
}
