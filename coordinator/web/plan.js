// A job's plan drawn as a pipeline: a box per stage with its blocks, workers and devices,
// copies, predicted compute and memory against the measured ones, arrows between stages.
// planModel is pure (no DOM): the figures the drawing shows, from /api/jobs/JOB.
import { si, seconds, svgEl } from "./draw.js";

// The names of a plan's blocks in order (its cluster's block_times keys), [] when unknown.
function blockNames(plan) {
  const types = plan.cluster && plan.cluster.device_types;
  for (const k in types || {})
    if (types[k].block_times) return Object.keys(types[k].block_times);
  return [];
}

export function planModel(job) {
  const plan = job.plan;
  if (!plan || !plan.stages) return null;
  const names = blockNames(plan);
  const figures = job.stage_figures || [];
  return {
    strategy: plan.strategy, schedule: plan.schedule, batch: plan.batch,
    microbatches: plan.microbatches ? plan.microbatches.count : null,
    microbatch_size: plan.microbatches ? plan.microbatches.size : null,
    precision: plan.precision || null,
    predicted_iteration_s: plan.iteration_time_s, measured_iteration_s: job.measured_iteration_s,
    stages: plan.stages.map((s, i) => {
      const f = figures.find(x => x.stage === i) || {};
      const blocks = [];
      for (let b = s.first_block; b <= s.last_block; b++) blocks.push(names[b] || "block " + b);
      return {
        stage: i, first_block: s.first_block, last_block: s.last_block, blocks,
        workers: s.worker_ids || [], devices: s.devices || [], replicas: s.replicas || 1,
        predicted_compute_s: s.compute_s, measured_compute_s: f.busy_s || null,
        predicted_memory_bytes: s.peak_memory_bytes,
        measured_memory_bytes: f.measured_memory_bytes || null,
        busy_fraction: f.busy_fraction === undefined ? null : f.busy_fraction,
        reduce: plan.replica_reduce ? plan.replica_reduce[i] : null,
        transport: plan.transports ? plan.transports[i] : null,
      };
    }),
  };
}

export function drawPlan(m) {
  const BW = 260, BH = 150, GAP = 40;
  const W = m.stages.length * (BW + GAP), H = BH + 30;
  const svg = svgEl("svg", { width: W, height: H, role: "img", "aria-label": "plan",
                             id: "plan-svg" });
  m.stages.forEach((s, i) => {
    const x = 6 + i * (BW + GAP), y = 6;
    svg.appendChild(svgEl("rect", { x, y, width: BW, height: BH, rx: 6, fill: "#eef4fb",
                                    stroke: "#0969da", "data-stage": s.stage }));
    const lines = [
      "stage " + s.stage + (s.replicas > 1 ? " x" + s.replicas + " copies" : ""),
      "blocks " + s.first_block + "-" + s.last_block + ": " + s.blocks.join(", "),
      "workers " + s.workers.join(", ") + " (devices " + s.devices.join(", ") + ")",
      "compute " + seconds(s.predicted_compute_s) + " planned, " +
        seconds(s.measured_compute_s) + " measured",
      "memory " + si(s.predicted_memory_bytes) + "B planned, " +
        si(s.measured_memory_bytes) + "B measured",
      "busy " + (s.busy_fraction === null ? "-" : (100 * s.busy_fraction).toFixed(0) + "%") +
        (s.reduce && s.reduce !== "none" ? ", all-reduce " + s.reduce : ""),
    ];
    lines.forEach((t, k) => {
      const txt = svgEl("text", { x: x + 8, y: y + 20 + k * 21, "font-size": k ? 11 : 12,
                                  "font-weight": k ? "normal" : "bold" }, t);
      txt.appendChild(svgEl("title", {}, t));
      svg.appendChild(txt);
    });
    if (i + 1 < m.stages.length)
      svg.appendChild(svgEl("line", { x1: x + BW + 4, y1: y + BH / 2, x2: x + BW + GAP - 6,
                                      y2: y + BH / 2, stroke: "#555", "stroke-width": 2 }));
  });
  svg.appendChild(svgEl("text", { x: 6, y: H - 6, "font-size": 11 },
    "schedule " + m.schedule + ", " + m.microbatches + " micro-batches of " + m.microbatch_size +
    " (batch " + m.batch + "), strategy " + m.strategy));
  return svg;
}
