// Each worker's recent log lines (/api/logs/WORKER, as `stagecraft logs WORKER` prints them):
// one <details> per worker, its lines fetched while it is open.
import { api } from "./api.js";
import { el } from "./draw.js";

const LOG_LINES = 100;

export function showLogs(box, workers) {
  for (const w of workers) {
    let d = box.querySelector("details[data-id='" + CSS.escape(w.id) + "']");
    if (!d) {
      d = el("details", { class: "log", "data-id": w.id });
      d.append(el("summary", {}, w.id + " (" + w.name + ")"), el("pre"));
      d.addEventListener("toggle", () => { if (d.open) fetchLog(d); });
      box.appendChild(d);
    }
    if (d.open) fetchLog(d);
  }
}

async function fetchLog(d) {
  const pre = d.querySelector("pre");
  try {
    const r = await api("/api/logs/" + encodeURIComponent(d.dataset.id) + "?lines=" + LOG_LINES);
    const w = r.workers[0];
    pre.textContent = w.error ? "no lines: " + w.error : w.lines.map(l => l.text).join("\n");
  } catch (e) {
    pre.textContent = "cannot fetch the lines: " + e.message;
  }
}
