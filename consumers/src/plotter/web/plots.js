// snapbus plotter: plots: adding, removing, selecting, their series and colours, zoom by drag.

import { $, GUTTER, PALETTE, RIGHT, S, el, esc } from './state.js';
import { baseOf, getJSON, loadHistory, runLabel, seriesTitle, yLabelOf } from './series.js';
import { renderSidebar } from './sidebar.js';
import { parseData, reconnect, requestRedraw } from './stream.js';
import { measureWidth } from './draw.js';

// Adds an empty plot (key: its default-view group, if any) and returns it; selected when the
// user made it.
export function addPlot(key, user) {
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
export function dropPlot(p) {
  S.plots = S.plots.filter((q) => q !== p);
  p.root.remove();
}

// Removes a plot (its series leave the stream).
export function removePlot(p) {
  dropPlot(p);
  const next = S.selected !== p ? S.selected : S.plots[S.plots.length - 1] || null;
  S.selected = undefined; // so that selectPlot redraws the sidebar
  selectPlot(next);
  reconnect();
  requestRedraw();
}

// Makes p the plot that the sidebar's + buttons add to.
export function selectPlot(p) {
  if (S.selected === p && p) return;
  S.selected = p;
  for (const q of S.plots) q.root.classList.toggle('selected', q === p);
  renderSidebar();
}

// The colour of series id in plot p.
export const colorOf = (p, id) => PALETTE[(p.colors.get(id) || 0) % PALETTE.length];

// Adds series id to plot p with the first colour not used there (changed: false while the
// default view is being built, which redraws once at the end).
export function addToPlot(p, id, changed = true) {
  if (p.ids.includes(id)) return;
  const used = new Set(p.colors.values());
  let c = 0;
  while (used.has(c)) c++;
  p.ids.push(id);
  p.colors.set(id, c);
  if (changed) plotChanged(p);
}

// Removes series id from plot p.
export function removeFromPlot(p, id) {
  p.ids = p.ids.filter((x) => x !== id);
  p.colors.delete(id);
  plotChanged(p);
}

// After a plot's series changed: legend, sidebar, stream, zoomed data.
export function plotChanged(p) {
  renderPlotHead(p);
  renderSidebar();
  if (p.zoom) setZoom(p, p.ids.length ? { from: p.zoom.from, to: p.zoom.to } : null);
  reconnect();
  if (!S.live) loadHistory();
  requestRedraw();
}

// The plot's title (its field group), where its data comes from, its legend (a wrapping list,
// each entry removable; none for a single series) and its "zoomed" badge.
export function renderPlotHead(p) {
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
export async function setZoom(p, range) {
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
export function startDrag(p, ev) {
  if (ev.button !== 0 || !p.view) return;
  const r = p.canvas.getBoundingClientRect();
  const left = r.left + GUTTER;
  const x = Math.max(0, Math.min(r.width - GUTTER - RIGHT, ev.clientX - left));
  S.drag = { p, left, w: r.width - GUTTER - RIGHT, x0: x, x1: x };
  ev.preventDefault();
}

// Mouse move while selecting: shows the selection box.
export function moveDrag(ev) {
  const d = S.drag;
  if (!d) return;
  d.x1 = Math.max(0, Math.min(d.w, ev.clientX - d.left));
  d.p.selbox.hidden = Math.abs(d.x1 - d.x0) < 2;
  d.p.selbox.style.left = GUTTER + Math.min(d.x0, d.x1) + 'px';
  d.p.selbox.style.width = Math.abs(d.x1 - d.x0) + 'px';
}

// Mouse up: zoom the plot to the selected x range (at least 5 px wide).
export function endDrag() {
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
