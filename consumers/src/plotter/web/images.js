// snapbus plotter: image series: one card per checked image, its latest frame drawn scaled.

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
export async function fetchFrame(id) {
  const v = S.imgViews.get(id);
  if (!v || v.busy) return;
  v.busy = true;
  const j = await getJSON(`/api/frame?id=${id}`, 'frame', [404]); // 404: no frame yet
  v.busy = false;
  if (j && S.imgViews.get(id) === v) drawFrame(id, v, j);
}

// Draws a frame (row-major 0..255, 1/3/4 channels) scaled up with nearest neighbour.
export function drawFrame(id, v, j) {
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
