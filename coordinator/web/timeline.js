// A job's measured timeline beside its planned one, from the trace `stagecraft trace JOB`
// writes (/api/jobs/JOB/trace, Chrome / Perfetto JSON): a row per stage copy as measured and per
// stage as planned, each action a box coloured by its kind. timelineRows is pure (no DOM).
import { el, svgEl } from "./draw.js";

const COLOURS = {
  forward: "#4c9be8", backward: "#e8904c", optimizer: "#8e6fd8", allreduce: "#d85a8e",
  send_activation: "#9fc5ee", recv_activation: "#cfe2f7", send_gradient: "#f0c29f",
  recv_gradient: "#f7e0cf",
};

// The kind of an event: its category, or for a planned one the first word of its name.
export function eventKind(e) {
  return e.cat === "planned" ? String(e.name).split(" ")[0] : e.cat;
}

// Rows [{label, sort, planned, events: [{kind, name, start_us, dur_us}]}] in the trace's own
// order (its process_sort_index), with the window's span {start_us, end_us}.
export function timelineRows(trace) {
  const rows = new Map();
  const row = pid => {
    if (!rows.has(pid)) rows.set(pid, { label: "row " + pid, sort: pid, planned: false, events: [] });
    return rows.get(pid);
  };
  let start = Infinity, end = -Infinity;
  for (const e of trace.traceEvents || []) {
    if (e.ph === "M" && e.name === "process_name") {
      row(e.pid).label = e.args.name;
      row(e.pid).planned = e.args.name.startsWith("planned");
    } else if (e.ph === "M" && e.name === "process_sort_index") {
      row(e.pid).sort = e.args.sort_index;
    } else if (e.ph === "X") {
      row(e.pid).events.push({ kind: eventKind(e), name: e.name, start_us: e.ts, dur_us: e.dur });
      start = Math.min(start, e.ts);
      end = Math.max(end, e.ts + e.dur);
    }
  }
  const out = [...rows.values()].filter(r => r.events.length > 0).sort((a, b) => a.sort - b.sort);
  return { rows: out, start_us: isFinite(start) ? start : 0, end_us: isFinite(end) ? end : 0 };
}

export function drawTimeline(tl) {
  const W = 1000, L = 260, RH = 18, T = 20;
  const H = T + tl.rows.length * (RH + 4) + 24;
  const svg = svgEl("svg", { width: W, height: H, role: "img", "aria-label": "timeline",
                             id: "timeline-svg" });
  const span = tl.end_us - tl.start_us || 1;
  const sx = t => L + (t - tl.start_us) / span * (W - L - 8);
  svg.appendChild(svgEl("text", { x: L, y: 13, "font-size": 11 },
                        "0 to " + (span / 1000).toPrecision(4) + " ms"));
  tl.rows.forEach((r, i) => {
    const y = T + i * (RH + 4);
    svg.appendChild(svgEl("text", { x: L - 6, y: y + 13, "font-size": 11, "text-anchor": "end",
                                    fill: r.planned ? "#666" : "#222" }, r.label));
    for (const e of r.events) {
      const box = svgEl("rect", { x: sx(e.start_us).toFixed(2), y,
        width: Math.max(0.5, (e.dur_us / span) * (W - L - 8)).toFixed(2), height: RH,
        fill: COLOURS[e.kind] || "#bbb", "fill-opacity": r.planned ? 0.55 : 1 });
      box.appendChild(svgEl("title", {}, e.name + ": " + e.dur_us.toPrecision(4) + " µs"));
      svg.appendChild(box);
    }
  });
  const legend = el("div", { class: "quiet" });
  legend.textContent = "kinds: " + Object.keys(COLOURS).join(", ") +
    " (planned rows paler; hover a box for its time)";
  const box = el("div");
  box.append(svg, legend);
  return box;
}
