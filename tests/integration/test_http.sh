#!/usr/bin/env bash
# The coordinator's HTTP view (--http): /metrics is strict Prometheus text (every sample's
# family has HELP and TYPE before it, names and labels well formed, families contiguous,
# counters end in _total; promtool's check where it is installed) with the workers and a
# running job's figures; /api/workers and /api/jobs are the objects `workers --json` and
# `status --json` print; unknown paths are 404 and writes 405; the page is served whole; beyond
# loopback the data routes are 401 without the client token and 200 with it; and a request with
# a huge header, or one that never finishes its headers, stalls neither the gRPC service nor
# the HTTP view.
# Usage: test_http.sh PATH/TO/stagecraft
sc=${1:?usage: test_http.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: needs python3"; exit 77; }

http_port() { sed -n 's/^dashboard and metrics on http port \([0-9]*\).*/\1/p' "$work/$1.log"; }

# get URL [TOKEN]: prints "CODE" then the body; exits 0 whatever the code
get() {
    python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        code, body = r.status, r.read()
except urllib.error.HTTPError as e:
    code, body = e.code, e.read()
print(code)
sys.stdout.write(body.decode())
PY
}
code_of() { get "$@" | head -n 1; }
body_of() { get "$@" | tail -n +2; }

# a coordinator beyond loopback (every address of this host): its token is needed
start_coordinator open "$work/open" --http 0.0.0.0:0
open_port=$(http_port open)
open_token=$STAGECRAFT_TOKEN
[ -n "$open_port" ] || fail "no http port in the log of --http 0.0.0.0:0"
[ "$(code_of "http://127.0.0.1:$open_port/metrics")" = 401 ] &&
    pass "beyond loopback: /metrics without the token is 401" || fail "no 401 without the token"
[ "$(code_of "http://127.0.0.1:$open_port/api/workers" wrong-token)" = 401 ] &&
    pass "a wrong token is 401" || fail "a wrong token was not refused"
[ "$(code_of "http://127.0.0.1:$open_port/metrics" "$open_token")" = 200 ] &&
    pass "with the token: 200" || fail "the token was refused"
grep -q "refused a request for /metrics without the client token" "$work/open.log" &&
    pass "the refusal is logged" || fail "the refusal is not logged"

# an --http address that is taken is an error that names it
"$sc" coordinator --listen 127.0.0.1:0 --state "$work/taken" --http "127.0.0.1:$open_port" \
    >"$work/taken.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q -- "--http 127.0.0.1:$open_port: cannot listen there" "$work/taken.log" &&
    pass "a taken --http port is refused by name" || fail "taken port: rc $rc, $(cat "$work/taken.log")"
"$sc" coordinator --state "$work/bad" --http nonsense >"$work/bad.log" 2>&1
[ $? -eq 2 ] && grep -q -- "--http" "$work/bad.log" && pass "a malformed --http is a usage error" ||
    fail "malformed --http: $(cat "$work/bad.log")"

# the coordinator under test, on loopback, with a worker and a running job (tokens of its own)
unset STAGECRAFT_TOKEN STAGECRAFT_JOIN_TOKEN
start_coordinator coord "$work/state" --http 127.0.0.1:0
port=$(http_port coord)
base="http://127.0.0.1:$port"
start_worker w-http --threads 1
wait_alive 20 1 || fail "the worker did not register"

api_names() { body_of "$base/api/workers" | python3 -c 'import json,sys; print(" ".join(w["name"] for w in json.load(sys.stdin)["workers"]))'; }
[ "$(api_names)" = w-http ] && pass "/api/workers lists w-http" || fail "/api/workers: $(body_of "$base/api/workers")"

# the same objects as the CLI's (heartbeat times move between the two reads)
same_json() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
volatile = set(sys.argv[3].split(","))
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in volatile}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o
sys.exit(0 if strip(a) == strip(b) else 1)
PY
}
body_of "$base/api/workers" >"$work/api_workers.json"
"$sc" workers --json >"$work/cli_workers.json"
same_json "$work/api_workers.json" "$work/cli_workers.json" last_heartbeat_unix_ms &&
    pass "/api/workers is what workers --json prints" || fail "/api/workers differs from workers --json"

cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "http-view",
 "model": {"kind": "mlp", "sizes": [32, 32, 32]},
 "data": {"kind": "synthetic"}, "batch_size": 16, "microbatches": 2, "schedule": "1f1b",
 "strategy": "hetero", "workers": 1, "steps": 1000000, "seed": 3, "rebalance": "off"}
JSON
id=$("$sc" submit "$work/job.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
[ -n "$id" ] || { fail "submit"; finish; exit 1; }
wait_for 120 is_state "$id" running || fail "$id is $(job_state "$id"): $(field "$id" reason)"
has_loss() { body_of "$base/metrics" | grep -q "^stagecraft_job_loss{job=\"$id\""; }
wait_for 60 has_loss && pass "/metrics has the running job's loss" ||
    fail "no loss of $id in /metrics: $(body_of "$base/metrics" | grep job_)"

body_of "$base/metrics" >"$work/metrics.txt"
python3 - "$work/metrics.txt" "$id" <<'PY' && pass "/metrics parses strictly" || fail "/metrics: see above"
import re, sys
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(?:\{(%s(?:,%s)*)?\})? (\S+)$" % (NAME, LABEL, LABEL))
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
text, job = open(sys.argv[1]).read(), sys.argv[2]
problems, helps, types, done, series = [], {}, {}, set(), set()
current = None
assert text.endswith("\n"), "no final newline"
for n, line in enumerate(text.splitlines(), 1):
    m = re.match(r"^# (HELP|TYPE) (\S+) (.+)$", line)
    if m:
        kind, name, rest = m.groups()
        if not re.fullmatch(NAME, name):
            problems.append("line %d: bad name %r" % (n, name))
        table = helps if kind == "HELP" else types
        if name in table:
            problems.append("line %d: a second %s for %s" % (n, kind, name))
        if kind == "TYPE" and rest not in TYPES:
            problems.append("line %d: type %r" % (n, rest))
        table[name] = rest
        if current != name:
            if name in done:
                problems.append("line %d: family %s split" % (n, name))
            if current:
                done.add(current)
            current = name
        continue
    if line.startswith("#") or not line:
        problems.append("line %d: stray %r" % (n, line))
        continue
    m = SAMPLE.match(line)
    if not m:
        problems.append("line %d: not a sample: %r" % (n, line))
        continue
    name, labels, value = m.groups()
    if name != current or name not in helps or name not in types:
        problems.append("line %d: %s has no HELP and TYPE before it" % (n, name))
    if not name.startswith("stagecraft_"):
        problems.append("line %d: %s lacks the stagecraft_ prefix" % (n, name))
    if types.get(name) == "counter" and not name.endswith("_total"):
        problems.append("line %d: counter %s without _total" % (n, name))
    if (name, labels) in series:
        problems.append("line %d: %s{%s} twice" % (n, name, labels))
    series.add((name, labels))
    try:
        float(value)
    except ValueError:
        problems.append("line %d: value %r" % (n, value))
names = {s[0] for s in series}
for want in ["stagecraft_workers", "stagecraft_worker_heartbeat_age_seconds", "stagecraft_job_step",
             "stagecraft_job_loss", "stagecraft_job_samples_per_second",
             "stagecraft_job_iteration_seconds", "stagecraft_job_state",
             "stagecraft_job_rebalances_total", "stagecraft_job_recoveries_total",
             "stagecraft_job_frozen_blocks", "stagecraft_rpc_calls_total"]:
    if want not in names:
        problems.append("no %s sample" % want)
if ("stagecraft_workers", 'state="alive"') not in series:
    problems.append("no alive count")
if not any(s[0] == "stagecraft_job_iteration_seconds" and 'kind="predicted"' in s[1] for s in series):
    problems.append("no predicted iteration time")
if not any(s[0] == "stagecraft_job_state" and ('job="%s"' % job) in s[1] and 'state="running"' in s[1]
           for s in series):
    problems.append("the job is not running in stagecraft_job_state")
value = {s: float(v) for s, v in ((s, l.rsplit(" ", 1)[1]) for l in text.splitlines()
         if not l.startswith("#") for s in [l.rsplit(" ", 1)[0]])}
jl = 'job="%s",name="http-view"' % job
if value.get("stagecraft_job_rebalances_total{%s}" % jl) != 0 or value.get("stagecraft_job_frozen_blocks{%s}" % jl) != 0:
    problems.append("the job's rebalances or frozen blocks are not 0")
# the test's own `stagecraft submit` and `status` calls reached the gRPC server
if not value.get('stagecraft_rpc_calls_total{method="/stagecraft.Coordinator/SubmitJob"}', 0) >= 1:
    problems.append("no SubmitJob call counted")
if not value.get('stagecraft_rpc_calls_total{method="/stagecraft.Coordinator/GetJob"}', 0) >= 1:
    problems.append("no GetJob call counted")
for p in problems:
    print("FAIL: metrics " + p)
sys.exit(1 if problems else 0)
PY
if command -v promtool >/dev/null 2>&1; then
    promtool check metrics <"$work/metrics.txt" && pass "promtool check metrics" ||
        fail "promtool check metrics"
else
    echo "skip: promtool not installed (Debian package prometheus): its check is left out"
fi

body_of "$base/api/jobs/$id" >"$work/api_job.json"
"$sc" status "$id" --json >"$work/cli_job.json"
keys() { python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1])).keys()))' "$1"; }
[ "$(keys "$work/api_job.json")" = "$(keys "$work/cli_job.json")" ] &&
    same_json "$work/api_job.json" "$work/cli_job.json" \
        step,loss,samples_per_s,measured_iteration_s,stage_figures,links,updated_unix_ms,last_checkpoint_step,busy_fraction &&
    pass "/api/jobs/$id is what status $id --json prints" || fail "/api/jobs/$id differs from status --json"
body_of "$base/api/jobs" >"$work/api_jobs.json"
"$sc" status --json >"$work/cli_jobs.json"
same_json "$work/api_jobs.json" "$work/cli_jobs.json" step,updated_unix_ms,last_checkpoint_step &&
    pass "/api/jobs is what status --json prints" || fail "/api/jobs differs from status --json"

# a job's page is the page; its trace is what `stagecraft trace` writes (measured and planned rows)
[ "$(code_of "$base/jobs/$id")" = 200 ] && body_of "$base/jobs/$id" | grep -q 'src="/web/app.js"' &&
    pass "/jobs/$id serves the page" || fail "/jobs/$id is not the page"
body_of "$base/api/jobs/$id/trace?iterations=4" >"$work/api_trace.json"
python3 - "$work/api_trace.json" <<'PY' && pass "/api/jobs/$id/trace: 4 iterations, measured and planned rows" || fail "/api/jobs/$id/trace: $(head -c 300 "$work/api_trace.json")"
import json, sys
t = json.load(open(sys.argv[1]))
o = t["otherData"]
assert o["last_iteration"] - o["first_iteration"] == 3, o
names = [e["args"]["name"] for e in t["traceEvents"] if e["name"] == "process_name"]
assert any(n.startswith("measured: stage 0") for n in names) and "planned: stage 0" in names, names
assert any(e["ph"] == "X" and e["cat"] == "forward" for e in t["traceEvents"])
PY
[ "$(code_of "$base/api/jobs/$id/trace?iterations=0")" = 400 ] &&
    pass "a trace of 0 iterations is refused (400)" || fail "iterations=0 not refused"
[ "$(code_of "$base/api/jobs/job-999999/trace")" = 404 ] && pass "an unknown job's trace is 404" ||
    fail "an unknown job's trace is not 404"
[ "$(code_of "$base/api/jobs/$id/nothing")" = 404 ] && pass "an unknown job route is 404" ||
    fail "an unknown job route is not 404"

[ "$(code_of "$base/nowhere")" = 404 ] && pass "an unknown path is 404" || fail "unknown path not 404"
[ "$(code_of "$base/api/jobs/job-999999")" = 404 ] && pass "an unknown job is 404" || fail "unknown job not 404"
python3 - "$port" <<'PY' && pass "POST is 405" || fail "POST not refused with 405"
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request("POST", "/api/jobs", body="{}")
sys.exit(0 if c.getresponse().status == 405 else 1)
PY
# the page and every module it imports, from the coordinator itself (nothing external)
python3 - "$base" <<'PY' && pass "the page and its modules are served whole, nothing external" || fail "the page's files: see above"
import re, sys, urllib.request
base, seen, todo, problems = sys.argv[1], set(), ["/"], []
while todo:
    path = todo.pop()
    if path in seen:
        continue
    seen.add(path)
    with urllib.request.urlopen(base + path, timeout=10) as r:
        body, ctype = r.read().decode(), r.headers["Content-Type"]
    if re.search(r'(src|href)="(https?:)?//|import[^;]*from\s*"(https?:)?//', body):
        problems.append(path + " refers to another host")
    refs = re.findall(r'(?:src|href)="(/web/[^"]+)"', body)
    refs += ["/web/" + m for m in re.findall(r'from\s*"\./([a-z_]+\.js)"', body)]
    todo += refs
    if path.endswith(".js") and not ctype.startswith("text/javascript"):
        problems.append("%s served as %s" % (path, ctype))
if not any(p.endswith("cluster.js") for p in seen) or len(seen) < 5:
    problems.append("modules reached: %s" % sorted(seen))
for p in problems:
    print("FAIL: page " + p)
sys.exit(1 if problems else 0)
PY
[ "$(code_of "$base/web/nothing.js")" = 404 ] && pass "an unknown page file is 404" ||
    fail "an unknown page file is not 404"

# /api/cluster: the server of the worker with its devices, and the worker as /api/workers has it
body_of "$base/api/cluster" >"$work/api_cluster.json"
python3 - "$work/api_cluster.json" "$work/api_workers.json" <<'PY' && pass "/api/cluster: the server, its worker, devices and probed link" || fail "/api/cluster: $(head -c 400 "$work/api_cluster.json")"
import json, sys
c, w = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))["workers"][0]
assert set(c) == {"servers", "coordinator_links", "worker_links"}, c.keys()
[s] = c["servers"]
assert s["host"] == w["host"] and [x["id"] for x in s["workers"]] == [w["id"]], s
assert s["devices"] == len(w["devices"]) and s["memory_bytes"] == sum(d["memory_bytes"] for d in w["devices"]), s
probed = [l for l in c["coordinator_links"] if l["worker_id"] == w["id"]]
sw = s["workers"][0]
# a running job profiled the worker, so its path to the coordinator was probed
assert len(probed) == 1 and probed[0]["bytes_per_s"] > 0 and probed[0]["latency_s"] > 0, c["coordinator_links"]
assert sw["link_bytes_per_s"] == probed[0]["bytes_per_s"] and sw["link_probed_unix_ms"] > 0, sw
PY

# bad clients: one that never finishes its headers, one with a 4 MiB header
python3 - "$port" "$work" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
open(sys.argv[2] + "/slow.started", "w").close()
for _ in range(300):  # a byte a second, never the end of the headers
    try:
        s.sendall(b"a")
    except OSError:
        break
    time.sleep(1)
PY
pids+=($!)
wait_for 10 test -e "$work/slow.started" || fail "the slow client did not start"
python3 - "$port" <<'PY' && pass "a 4 MiB header is refused and closed" || fail "the huge header hung"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=15)
try:
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (4 << 20) + b"\r\n\r\n")
except OSError:
    pass  # closed by the server while we were still sending: refused
try:
    answer = s.recv(64)
except ConnectionResetError:
    answer = b""
sys.exit(0 if answer == b"" or not answer.startswith(b"HTTP/1.1 200") else 1)
PY
timeout 10 "$sc" workers >/dev/null && pass "gRPC answers while the bad clients hold on" ||
    fail "gRPC stalled by the HTTP clients"
[ "$(code_of "$base/api/workers")" = 200 ] && pass "HTTP answers beside the slow client" ||
    fail "HTTP stalled by the slow client"
running "$coord_pid" || fail "the coordinator died"

"$sc" cancel "$id" >/dev/null || fail "cancel"
wait_for 60 is_state "$id" cancelled || fail "$id is $(job_state "$id")"
finish
