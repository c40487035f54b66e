// Small drawing helpers of the page: table cells, number formats and SVG elements and plots.
// Pure DOM: no data fetched here.
export const SVG = "http://www.w3.org/2000/svg";

export function el(name, attrs, text) {
  const e = document.createElement(name);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

export function cell(tr, text, cls) {
  const td = el("td", cls ? { class: cls } : {}, text);
  tr.appendChild(td);
  return td;
}

// A figure, "-" when unknown (null, undefined, 0) or not finite.
export function fmt(v, digits) {
  return v === null || v === undefined || v === 0 || !isFinite(v) ? "-"
    : Number(v).toPrecision(digits);
}

// Bytes or bytes/s with a decimal prefix: 1.25e9 -> "1.25 G".
export function si(v) {
  if (v === null || v === undefined || !isFinite(v) || v <= 0) return "-";
  const units = ["", "k", "M", "G", "T", "P"];
  let i = 0;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return v.toPrecision(3) + " " + units[i];
}

export function seconds(v) {
  if (v === null || v === undefined || !isFinite(v) || v <= 0) return "-";
  return v < 1e-3 ? (v * 1e6).toPrecision(3) + " µs" : v < 1 ? (v * 1e3).toPrecision(3) + " ms"
    : v.toPrecision(3) + " s";
}

export function svgEl(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// A line plot of points [[x, y]...] with its ranges written at the axes' ends.
export function linePlot(points, title, xName) {
  const W = 520, H = 180, L = 56, B = 22, T = 18;
  const svg = svgEl("svg", { width: W, height: H, role: "img", "aria-label": title });
  const label = (x, y, text, anchor) =>
    svg.appendChild(svgEl("text", { x, y, "font-size": 11, "text-anchor": anchor || "start" }, text));
  label(L, 12, title);
  if (points.length > 0) {
    const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs);
    let y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const sx = x => L + (x1 === x0 ? 0 : (x - x0) / (x1 - x0)) * (W - L - 8);
    const sy = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    svg.appendChild(svgEl("polyline", {
      points: points.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "),
      fill: "none", stroke: "#0969da", "stroke-width": 1.5 }));
    label(L - 4, T + 8, y1.toPrecision(4), "end");
    label(L - 4, H - B, y0.toPrecision(4), "end");
    label(L, H - 6, (xName || "step") + " " + x0);
    label(W - 8, H - 6, (xName || "step") + " " + x1, "end");
  }
  return svg;
}

// The loss and samples/s curves of a job's series (/api/jobs/JOB/history's "history").
export function curves(history, what) {
  const series = key => history.filter(p => p[key] !== null).map(p => [p.step, p[key]]);
  const div = el("div", { class: "plot" });
  div.appendChild(linePlot(series("loss"), "loss" + what));
  div.appendChild(linePlot(series("samples_per_s"), "samples/s" + what));
  return div;
}
