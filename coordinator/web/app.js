// The dashboard's entry: reads the address (the overview, or a job's page at #/jobs/JOB or
// /jobs/JOB), polls the coordinator every POLL_MS and hands each view its data. A failed poll
// says why in the header and tries again at the next one.
import { POLL_MS, api, tokenSuffix } from "./api.js";
import { showCluster } from "./cluster.js";
import { fetchHistories, fetchJobs, showJobs } from "./jobs.js";
import { showJob } from "./job.js";
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

// The job the address names (#/jobs/JOB or /jobs/JOB), null for the overview.
function jobOfAddress() {
  const m = location.hash.match(/^#\/jobs\/([^&]+)/) || location.pathname.match(/^\/jobs\/([^/]+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

async function poll(g) {
  try {
    const id = jobOfAddress();
    $("overview").hidden = id !== null;
    $("job").hidden = id === null;
    if (id !== null) await showJob($("job"), id);
    else await overview();
    $("note").textContent =
      "updated " + new Date().toLocaleTimeString() + "; every " + POLL_MS / 1000 + " s";
  } catch (e) {
    $("note").textContent = "cannot reach the coordinator: " + e.message;
  }
  if (g === generation) timer = setTimeout(() => poll(g), POLL_MS);
}

// a new address is drawn at once (a job's page is built anew); a poll of the old one that is
// still in flight ends its loop when it returns
let timer = null, generation = 0;
window.addEventListener("hashchange", () => {
  clearTimeout(timer);
  generation++;
  $("job").replaceChildren();
  poll(generation);
});
$("home").href = "/#" + tokenSuffix().slice(1);
poll(generation);
