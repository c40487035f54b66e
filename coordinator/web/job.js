// A job's page (#/jobs/JOB): its figures, the history of its states with their reasons, its loss
// and throughput curves, its plan drawn as a pipeline with each stage's predicted and measured
// compute and memory, and the measured timeline of its last iterations beside the planned one
// (the trace `stagecraft trace JOB` writes, which the page also offers as a file for Perfetto).
import { api, headers } from "./api.js";
import { cell, curves, el, fmt, si, seconds } from "./draw.js";
import { LIVE } from "./jobs.js";
import { drawPlan, planModel } from "./plan.js";
import { drawTimeline, timelineRows } from "./timeline.js";

// The trace asks every worker of the job for its timeline: not at every poll.
const TRACE_EVERY_MS = 10000;
let traceAt = 0, traceOf = null;

function table(id, heads) {
  const t = el("table", { id });
  const tr = el("tr");
  for (const h of heads) tr.appendChild(el("th", {}, h));
  t.appendChild(el("thead")).appendChild(tr);
  t.appendChild(el("tbody"));
  return t;
}

function figures(j) {
  const t = el("table", { class: "figures", id: "job-figures" });
  const row = (k, v, cls) => { const tr = el("tr"); cell(tr, k); cell(tr, v, cls); t.appendChild(tr); };
  row("state", j.state, j.state);
  row("reason", j.reason);
  row("step", j.step + " / " + j.steps);
  row("loss", fmt(j.loss, 4));
  row("samples/s", fmt(j.samples_per_s, 4));
  row("iteration (predicted / measured)", seconds(j.predicted_iteration_s) + " / " +
      seconds(j.measured_iteration_s));
  row("last checkpoint", j.last_checkpoint_step ? "step " + j.last_checkpoint_step : "-");
  row("profiling", j.profiling_rounds ? seconds(j.profiling_s) + " in " + j.profiling_rounds +
      " round(s)" : "-");
  return t;
}

function transitions(j) {
  const t = table("transitions", ["at", "from", "to", "reason"]);
  const body = t.querySelector("tbody");
  for (const x of j.transitions) {
    const tr = el("tr");
    cell(tr, new Date(x.at_unix_ms).toLocaleString());
    cell(tr, x.from || "-", x.from);
    cell(tr, x.to, x.to);
    cell(tr, x.reason);
    body.appendChild(tr);
  }
  return t;
}

function stageTable(m) {
  const t = table("stages", ["stage", "blocks", "workers", "compute planned", "compute measured",
                             "memory planned", "memory measured", "busy"]);
  const body = t.querySelector("tbody");
  for (const s of m.stages) {
    const tr = el("tr", { "data-stage": s.stage });
    cell(tr, String(s.stage));
    cell(tr, s.first_block + "-" + s.last_block);
    cell(tr, s.workers.join(", "));
    cell(tr, seconds(s.predicted_compute_s), "n");
    cell(tr, seconds(s.measured_compute_s), "n");
    cell(tr, si(s.predicted_memory_bytes) + "B", "n");
    cell(tr, si(s.measured_memory_bytes) + "B", "n");
    cell(tr, s.busy_fraction === null ? "-" : (100 * s.busy_fraction).toFixed(0) + "%", "n");
    body.appendChild(tr);
  }
  return t;
}

async function download(id, button) {
  button.disabled = true;
  try {
    const r = await fetch("/api/jobs/" + encodeURIComponent(id) + "/trace",
                          { headers: headers(), cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const url = URL.createObjectURL(await r.blob());
    const a = el("a", { href: url, download: id + ".trace.json" });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    button.textContent = "cannot download: " + e.message;
  } finally {
    button.disabled = false;
  }
}

async function showTrace(box, j) {
  try {
    const trace = await api("/api/jobs/" + encodeURIComponent(j.job_id) + "/trace");
    const o = trace.otherData || {};
    const tl = timelineRows(trace);
    box.replaceChildren(el("p", {}, "iterations " + o.first_iteration + " to " +
      o.last_iteration + ": measured " + seconds(o.measured_iteration_s) + " per iteration, " +
      "planned " + seconds(o.planned_iteration_s)), drawTimeline(tl));
  } catch (e) {
    box.replaceChildren(el("p", { class: "quiet" }, "no timeline yet: " + e.message));
  }
}

// Builds the page of job `id` into `main` (the first call) or brings it up to date.
export async function showJob(main, id) {
  const path = "/api/jobs/" + encodeURIComponent(id);
  const [j, h] = await Promise.all([api(path), api(path + "/history")]);
  if (!main.querySelector("#job-title")) {
    const button = el("button", { id: "download-trace" }, "Download the trace (Perfetto)");
    button.addEventListener("click", () => download(id, button));
    main.replaceChildren(el("h2", { id: "job-title" }), el("div", { id: "job-figures-box" }),
      el("h3", {}, "Loss and throughput"), el("div", { id: "job-curves" }),
      el("h3", {}, "Plan"), el("div", { id: "job-plan" }),
      el("h3", {}, "Timeline of the last iterations (measured beside planned)"), button,
      el("div", { id: "job-timeline" }), el("h3", {}, "History"),
      el("div", { id: "job-transitions" }));
    traceAt = 0;
  }
  main.querySelector("#job-title").textContent = j.job_id + " (" + j.name + ")";
  main.querySelector("#job-figures-box").replaceChildren(figures(j));
  main.querySelector("#job-curves").replaceChildren(curves(h.history, ""));
  const m = planModel(j);
  main.querySelector("#job-plan").replaceChildren(...(m ? [drawPlan(m), stageTable(m)]
    : [el("p", { class: "quiet" }, "not planned yet")]));
  main.querySelector("#job-transitions").replaceChildren(transitions(j));
  const now = Date.now();
  if (traceOf !== id || (LIVE.has(j.state) && now - traceAt >= TRACE_EVERY_MS) || traceAt === 0) {
    traceAt = now;
    traceOf = id;
    await showTrace(main.querySelector("#job-timeline"), j);
  }
}
