// The cluster view of the overview (/api/cluster): each server with its devices and workers
// (state, activity, heartbeat, job), each worker's probed path to the coordinator, and the
// links that running jobs measure between their workers against what their plans expect.
import { cell, el, fmt, si, seconds } from "./draw.js";

function devices(w) {
  if (!w.devices || w.devices.length === 0) return "-";
  return w.devices.map(d => d.kind + " " + d.name + " " + si(d.memory_bytes) + "B").join(", ");
}

function serverTable(servers, now) {
  const t = el("table", { id: "workers" });
  const head = el("tr");
  for (const h of ["server / worker", "id", "state", "activity", "devices", "heartbeat", "job",
                   "compute: measured / profiled", "link to coordinator"])
    head.appendChild(el("th", {}, h));
  t.appendChild(el("thead")).appendChild(head);
  const body = t.appendChild(el("tbody"));
  for (const s of servers) {
    const tr = el("tr", { class: "server" });
    cell(tr, s.host || "(no host)");
    const td = cell(tr, s.workers.length + " worker(s), " + s.devices + " device(s), " +
                    si(s.memory_bytes) + "B");
    td.colSpan = 8;
    body.appendChild(tr);
    for (const w of s.workers) {
      const r = el("tr", { "data-worker": w.name });
      cell(r, w.name);
      cell(r, w.id);
      cell(r, w.state, w.state);
      cell(r, w.activity || "-");
      cell(r, devices(w));
      cell(r, w.last_heartbeat_unix_ms > 0
        ? ((now - w.last_heartbeat_unix_ms) / 1000).toFixed(1) + " s ago" : "never", "n");
      cell(r, w.job_id || "-");
      // its stage's compute per iteration against what its profile predicted
      cell(r, w.compute_measured_s === null || w.compute_predicted_s === null ? "-"
        : seconds(w.compute_measured_s) + " / " + seconds(w.compute_predicted_s) + " (" +
          (w.compute_measured_s / w.compute_predicted_s).toFixed(2) + "x)", "n");
      cell(r, w.link_bytes_per_s === null ? "not probed"
        : si(w.link_bytes_per_s) + "B/s, " + seconds(w.link_latency_s), "n");
      body.appendChild(r);
    }
  }
  return t;
}

function linkTable(links) {
  const t = el("table", { id: "links" });
  const head = el("tr");
  for (const h of ["job", "from", "to", "measured B/s", "expected B/s", "message", "transit",
                   "samples"])
    head.appendChild(el("th", {}, h));
  t.appendChild(el("thead")).appendChild(head);
  const body = t.appendChild(el("tbody"));
  for (const l of links) {
    const tr = el("tr");
    cell(tr, l.job_id);
    cell(tr, l.from + (l.from_host ? " (" + l.from_host + ")" : ""));
    cell(tr, l.to + (l.to_host ? " (" + l.to_host + ")" : ""));
    cell(tr, si(l.measured_bytes_per_s), "n");
    cell(tr, si(l.expected_bytes_per_s), "n");
    cell(tr, si(l.message_bytes) + "B", "n");
    cell(tr, seconds(l.message_s), "n");
    cell(tr, fmt(l.samples, 3), "n");
    body.appendChild(tr);
  }
  return t;
}

export function showCluster(box, cluster) {
  const now = Date.now();
  box.replaceChildren(serverTable(cluster.servers, now));
  box.appendChild(el("h3", {}, "Links between workers (measured by the running jobs)"));
  if (cluster.worker_links.length === 0)
    box.appendChild(el("p", { class: "quiet" }, "none measured yet"));
  else
    box.appendChild(linkTable(cluster.worker_links));
}
