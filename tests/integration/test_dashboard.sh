#!/usr/bin/env bash
# The dashboard's own code against a real coordinator with a running two-worker job, without a
# browser: every /api path the page's modules fetch (read from their source) answers 200 with
# JSON; every API field the modules read (their snake_case property names) is one the answers
# or the page's own models carry; and, under node, the page's pure models turn the real answers
# into what it draws: the plan's two stages with their blocks and workers, and the trace's
# measured and planned rows per stage.
# Usage: test_dashboard.sh PATH/TO/stagecraft
sc=${1:?usage: test_dashboard.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: needs python3"; exit 77; }
command -v node >/dev/null 2>&1 || { echo "SKIP: needs node (Debian package nodejs)"; exit 77; }

start_coordinator coord "$work/state" --http 127.0.0.1:0
port=$(sed -n 's/^dashboard and metrics on http port \([0-9]*\).*/\1/p' "$work/coord.log")
base="http://127.0.0.1:$port"
start_worker a --threads 1
start_worker b --threads 1
wait_alive 30 2 || fail "the workers did not register"
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "page",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 8, "layers": 2, "width": 16, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 4, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 1000000, "seed": 3, "rebalance": "off"}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 running || fail "job-1 is $(job_state job-1): $(field job-1 reason)"
links_measured() { "$sc" status job-1 --json | grep -q '"from": "w-'; }
wait_for 60 links_measured || fail "job-1 measured no link"

# the page's files as the coordinator serves them, into a folder node reads as ES modules
mkdir -p "$work/web"
python3 - "$base" "$work/web" <<'PY' || fail "fetching the page's files"
import re, sys, urllib.request
base, out = sys.argv[1], sys.argv[2]
todo, seen = ["app.js"], set()
while todo:
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    body = urllib.request.urlopen(base + "/web/" + name, timeout=10).read().decode()
    open(out + "/" + name, "w").write(body)
    todo += re.findall(r'from\s*"\./([a-z_]+\.js)"', body)
open(out + "/package.json", "w").write('{"type": "module"}\n')
PY

# every /api path in the page's source, with JOB and WORKER filled in, and the answers kept
python3 - "$base" "$work/web" "$work/answers.json" <<'PY' && pass "every /api path the page fetches answers JSON" || fail "the page's /api paths: see above"
import glob, json, re, sys, urllib.request
base, web, keep = sys.argv[1], sys.argv[2], sys.argv[3]
src = "".join(open(f).read() for f in glob.glob(web + "/*.js"))
# "/api/jobs/" + encodeURIComponent(x) + "/history" -> /api/jobs/ID/history
paths = set()
for m in re.finditer(r'"(/api/[a-z/]*)"((?:\s*\+\s*[^"+;]+)?)(?:\s*\+\s*"(/[a-z]+)[^"]*")?', src):
    p = m.group(1) + ("ID" if m.group(2) else "") + (m.group(3) or "")
    paths.add(p)
workers = json.load(urllib.request.urlopen(base + "/api/workers", timeout=10))["workers"]
fill = {"/api/jobs/": "job-1", "/api/logs/": workers[0]["id"]}
answers, problems = {}, []
for p in sorted(paths):
    for prefix, v in fill.items():
        if p.startswith(prefix) and "ID" in p:
            p = p.replace("ID", v)
    try:
        answers[p] = json.load(urllib.request.urlopen(base + p, timeout=20))
    except Exception as e:
        problems.append("%s: %s" % (p, e))
want = {"/api/cluster", "/api/jobs", "/api/jobs/job-1", "/api/jobs/job-1/history",
        "/api/jobs/job-1/trace", "/api/logs/" + workers[0]["id"]}
if not want <= set(answers):
    problems.append("paths found in the source: %s" % sorted(paths))
for p in problems:
    print("FAIL: " + p)
json.dump(answers, open(keep, "w"))
sys.exit(1 if problems else 0)
PY

cat >"$work/web/check.js" <<'EOF_JS'
// Runs the page's pure models on the coordinator's answers; prints what fails.
import { readFileSync } from "fs";
import { planModel } from "./plan.js";
import { timelineRows } from "./timeline.js";
const answers = JSON.parse(readFileSync(process.argv[2]));
const job = answers["/api/jobs/job-1"], trace = answers["/api/jobs/job-1/trace"];
const problems = [];
const m = planModel(job);
if (!m || m.stages.length !== 2) problems.push("plan: " + JSON.stringify(m));
else {
  if (m.stages[0].blocks.length !== m.stages[0].last_block - m.stages[0].first_block + 1 ||
      m.stages[0].blocks.some(b => b.startsWith("block ")))
    problems.push("stage 0's blocks are not named: " + m.stages[0].blocks);
  const ws = m.stages.flatMap(s => s.workers).sort();
  if (ws.join() !== job.stage_figures.flatMap(s => s.worker_ids).sort().join())
    problems.push("plan workers " + ws);
  if (!(m.stages[1].measured_memory_bytes > 0 && m.stages[1].predicted_memory_bytes > 0))
    problems.push("stage 1's memory figures are missing");
  if (m.schedule !== "1f1b" || m.microbatches !== 2) problems.push("schedule or micro-batches");
}
const tl = timelineRows(trace);
const labels = tl.rows.map(r => r.label);
for (const s of [0, 1]) {
  if (!labels.some(l => l.startsWith("measured: stage " + s)))
    problems.push("no measured row of stage " + s + ": " + labels);
  if (!labels.includes("planned: stage " + s))
    problems.push("no planned row of stage " + s + ": " + labels);
}
if (!(tl.end_us > tl.start_us) || tl.rows.some(r => r.events.some(e => !(e.dur_us >= 0))))
  problems.push("the window or an event's time");
if (!tl.rows[0].events.some(e => e.kind === "forward")) problems.push("no forward on row 0");
// keys the models produce, for the field check that follows
const keys = new Set();
const walk = o => { if (o && typeof o === "object") for (const k in o) { keys.add(k); walk(o[k]); } };
walk(m); walk(tl);
console.log(JSON.stringify({ problems, keys: [...keys] }));
EOF_JS
node "$work/web/check.js" "$work/answers.json" >"$work/check.out" 2>&1 ||
    fail "node: $(cat "$work/check.out")"
python3 - "$work/check.out" "$work/answers.json" "$work/web" <<'PY' && pass "the page's models draw the real plan and timeline, and every field it reads exists" || fail "see above"
import glob, json, re, sys
out = json.load(open(sys.argv[1]))
answers = json.load(open(sys.argv[2]))
for p in out["problems"]:
    print("FAIL: model " + p)
keys = set(out["keys"])
def walk(o):
    if isinstance(o, dict):
        for k, v in o.items():
            keys.add(k)
            walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
walk(answers)
src = "".join(open(f).read() for f in glob.glob(sys.argv[3] + "/*.js") if not f.endswith("check.js"))
read = set(re.findall(r"\.([a-z]+_[a-z_]+)\b", src))
missing = sorted(read - keys)
for k in missing:
    print("FAIL: the page reads .%s, which no answer carries" % k)
sys.exit(1 if out["problems"] or missing else 0)
PY
"$sc" cancel job-1 >/dev/null || fail "cancel"
finish
