// The dashboard's entry: reads the address (the overview, or a job's page at #/jobs/JOB or
// /jobs/JOB), polls the coordinator every POLL_MS and hands each view its data. A failed poll
// says why in the header and tries again at the next one.
import { POLL_MS, api, tokenSuffix } from "./api.js";
import { showCluster } from "./cluster.js";
import { fetchHistories, fetchJobs, showJobs } from "./jobs.js";
import { showLogs } from "./logs.js";

const $ = id => document.getElementById(id);

export function jobLink(id) {
  return "#/jobs/" + encodeURIComponent(id) + tokenSuffix();
}

async function overview() {
  const [cluster, jobs] = await Promise.all([api("/api/cluster"), fetchJobs()]);
  showCluster($("cluster"), cluster);
  await fetchHistories(jobs);
  showJobs(document.querySelector("#jobs tbody"), $("plots"), jobs, jobLink);
  showLogs($("logs"), cluster.servers.flatMap(s => s.workers));
}

async function poll() {
  try {
    await overview();
    $("note").textContent =
      "updated " + new Date().toLocaleTimeString() + "; every " + POLL_MS / 1000 + " s";
  } catch (e) {
    $("note").textContent = "cannot reach the coordinator: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}
poll();
