// snapbus plotter: the page. Plain ES2020 modules, no libraries. Talks to the plotter's HTTP
// API (/api/series, /api/data, /api/frame, /api/stream) and draws min/max envelopes on
// <canvas>. This module wires the controls and starts loading; the others are imported.

import { $, S, SPANS } from './state.js';
import { loadSeries, resetView, updateHook } from './series.js';
import { addPlot, endDrag, moveDrag, renderPlotHead } from './plots.js';
import { reconnect, requestRedraw, spanValue } from './stream.js';
import { measureWidth } from './draw.js';

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
