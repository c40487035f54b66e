// The jobs of the overview (/api/jobs, each live one's own /api/jobs/JOB): a row each, linking to
// the job's page, and each job's loss and throughput curves from the series the coordinator
// keeps (/api/jobs/JOB/history, the same as `stagecraft status JOB --history`).
import { api } from "./api.js";
import { cell, curves, el, fmt } from "./draw.js";

export const LIVE = new Set(["submitted", "profiling", "planned", "running", "recovering",
                             "rebalancing"]);

// job id -> {state, history}: its series as /api/jobs/JOB/history last gave it
const histories = new Map();

// Every job, a live one with its figures (a listing carries state and step only).
export async function fetchJobs() {
  const j = await api("/api/jobs");
  return Promise.all(j.jobs.map(x =>
    LIVE.has(x.state) ? api("/api/jobs/" + encodeURIComponent(x.job_id)) : x));
}

// Each job's series: a live job's every poll, an ended one's once (it no longer changes).
export async function fetchHistories(jobs) {
  await Promise.all(jobs.map(async j => {
    const kept = histories.get(j.job_id);
    if (kept && kept.state === j.state && !LIVE.has(j.state)) return;
    const h = await api("/api/jobs/" + encodeURIComponent(j.job_id) + "/history");
    histories.set(j.job_id, { state: j.state, history: h.history });
  }));
}

export function showJobs(body, plots, jobs, link) {
  body.replaceChildren();
  for (const j of jobs) {
    const tr = el("tr", { "data-job": j.job_id });
    const a = el("a", { href: link(j.job_id) }, j.job_id);
    cell(tr, "").appendChild(a);
    cell(tr, j.name);
    cell(tr, j.state, j.state);
    cell(tr, j.step + " / " + j.steps, "n");
    cell(tr, fmt(j.loss, 4), "n");
    cell(tr, fmt(j.samples_per_s, 4), "n");
    cell(tr, fmt(j.measured_iteration_s, 3) + " / " + fmt(j.predicted_iteration_s, 3), "n");
    cell(tr, j.reason);
    body.appendChild(tr);
  }
  plots.replaceChildren();
  for (const j of jobs) {
    const h = histories.get(j.job_id);
    if (!h || h.history.length === 0) continue;
    plots.appendChild(curves(h.history, " of " + j.job_id + " (" + j.name + ")"));
  }
}
