// snapbus plotter: the sidebar: series rows grouped by schema and run, and the image list.

import { $, S, el, esc } from './state.js';
import { fmtStart, isSummary, runLabel, runOf, seriesTitle, updateHook } from './series.js';
import { addPlot, addToPlot, colorOf, removeFromPlot, removePlot } from './plots.js';
import { renderImages } from './images.js';

// One sidebar row: checkbox, colour swatch, name, a muted note, and (optionally) a button
// that adds the series to the selected panel.
export function checkRow(name, note, checked, color, title, onChange, onAdd) {
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
export function section(key, summaryHtml, cls) {
  const d = el('details', cls);
  d.open = S.open.has(key);
  d.addEventListener('toggle', () => { if (d.open) S.open.add(key); else S.open.delete(key); });
  const sm = el('summary');
  sm.innerHTML = summaryHtml;
  d.append(sm);
  return d;
}

// The rows of some series: checked = in a panel; + = add to the selected panel.
export function seriesRows(members, name) {
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
export function renderSidebar() {
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
export function toggleSeries(id, on) {
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
export function addToSelected(id) {
  if (!S.selected) return;
  S.auto = false;
  addToPlot(S.selected, id);
}
