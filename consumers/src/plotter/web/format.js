// snapbus plotter: number, time and text formatting; niceStep for the axes.

import { fin } from './state.js';

// 1234.5 -> "1.2 kHz".
export function fmtRate(hz) {
  if (!fin(hz) || hz <= 0) return '0 Hz';
  if (hz < 1000) return hz.toFixed(hz < 10 ? 1 : 0) + ' Hz';
  return hz < 1e6 ? (hz / 1e3).toFixed(1) + ' kHz' : (hz / 1e6).toFixed(1) + ' MHz';
}

// Integer with thousands separators.
export const fmtInt = (n) => (fin(n) ? Math.round(n).toLocaleString('en-US') : '0');

// Epoch seconds -> local "HH:MM:SS" (with fractions when the tick step is below 1 s).
export function fmtClock(t, step) {
  if (!fin(t)) return '–';
  const d = new Date(t * 1000);
  const s = [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
  const digits = step < 1 ? Math.min(3, Math.ceil(-Math.log10(step) - 1e-9)) : 0;
  return digits ? s + '.' + String(d.getMilliseconds()).padStart(3, '0').slice(0, digits) : s;
}

// A tick value with as many decimals as its step needs.
export function fmtNum(v, step) {
  if (Math.abs(v) < step * 1e-6) v = 0;
  const a = Math.abs(v);
  if (a >= 1e6 || (a > 0 && step < 1e-4)) return v.toExponential(2);
  return v.toFixed(Math.max(0, Math.min(8, -Math.floor(Math.log10(step) + 1e-9))));
}

// Sample numbers: 1234567 -> "1.23457M".
export function fmtCount(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return +(v / 1e6).toPrecision(6) + 'M';
  return a >= 1e4 ? +(v / 1e3).toPrecision(6) + 'k' : String(Math.round(v));
}

// A 1-2-5 step giving about n ticks over range.
export function niceStep(range, n) {
  const raw = range / Math.max(1, n);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}
