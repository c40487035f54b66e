#!/usr/bin/env bash
# A training job on this machine's GPU (or CPU) through the whole system: a coordinator and N
# workers on one device, the job planned, profiled and run as users run it. Prints per run the
# measured and predicted iteration, tokens/s, each stage's busy time, and writes the job's trace
# (Perfetto JSON) beside the log. Used by gpu-check.sh --full for the job-path figures.
#
#   bench/gpu_job.sh PATH/TO/stagecraft OUT_DIR [--device cuda:0] [--workers "1 2"]
#       [--precision bf16] [--model JSON] [--batch 32] [--microbatches 8] [--steps 30]
#       [--schedule 1f1b] [--strategy minmax]
# The default model is GPT-2 124M's shapes (vocabulary 50257, 12 layers, width 768, 12 heads,
# sequence 1024) on synthetic tokens. Each worker count in --workers is one run.
set -euo pipefail
sc=$(readlink -f "${1:?usage: gpu_job.sh PATH/TO/stagecraft OUT_DIR [flags]}")
out=${2:?usage: gpu_job.sh PATH/TO/stagecraft OUT_DIR [flags]}
shift 2
device=cuda:0 counts="1 2" precision=bf16 batch=32 mbs=8 steps=30 schedule=1f1b strategy=minmax
model='{"kind": "gpt", "name": "gpt2-124M", "vocab": 50257, "seq_len": 1024, "layers": 12, "width": 768, "heads": 12}'
while [ $# -gt 0 ]; do
    case $1 in
    --device) device=$2; shift 2 ;;
    --workers) counts=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --microbatches) mbs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --schedule) schedule=$2; shift 2 ;;
    --strategy) strategy=$2; shift 2 ;;
    *) echo "gpu_job: unknown flag $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
# shellcheck source=local_cluster.sh
. "$(dirname "$0")/local_cluster.sh"
local_scratch gpujob

# stop_all: SIGTERM to every process started, SIGKILL to one still there 15 s later (named: a
# process that does not stop when asked is a finding of its own)
stop_all() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            echo "gpu_job: process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-80)) did not stop within 15 s of SIGTERM: killed"
            kill -KILL "$p" 2>/dev/null || true
        fi
        wait "$p" 2>/dev/null || true
    done
    pids=()
}

# logs_tail: the last lines of the coordinator's and the workers' logs (a job that failed or
# did not end in time)
logs_tail() {
    local f
    for f in "$work"/coord.log "$work"/g*.log; do
        [ -f "$f" ] && { echo "== $(basename "$f")"; tail -n "${1:-25}" "$f"; }
    done
}

deadline=${GPU_JOB_DEADLINE_S:-150}
for n in $counts; do
    # a fresh coordinator and workers per run: nothing measured in one run steers the next
    stop_all
    rm -rf "$work/coord$n" "$work/coord.log"
    # the last run's tokens would be taken as this coordinator's own (it then writes none)
    unset STAGECRAFT_JOIN_TOKEN STAGECRAFT_TOKEN STAGECRAFT_COORDINATOR
    local_coordinator "$work/coord$n" || { tail -n 5 "$work/coord.log"; exit 1; }
    # names (and state folders) of this run alone: a worker that kept the id an earlier
    # coordinator gave it is refused where the new one gave that id to another
    names=$(seq -s ' ' -f "g$n-%g" 1 "$n")
    local_workers "$names" --device "$device"
    cat >"$work/job$n.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "gpu-job-$n", "model": $model,
 "data": {"kind": "synthetic"}, "batch_size": $batch, "microbatches": $mbs,
 "schedule": "$schedule", "strategy": "$strategy", "workers": $n, "steps": $steps,
 "precision": "$precision", "rebalance": "off"}
JSON
    id=$("$sc" submit "$work/job$n.json" | sed -n 's/^submitted \(job-[0-9]*\).*/\1/p')
    [ -n "$id" ] || { echo "gpu_job: submit failed"; cat "$work/coord.log" | tail -n 20; exit 1; }
    # the trace of the last iterations while the job still runs; at most `deadline` seconds
    t0=$SECONDS st=
    while [ $((SECONDS - t0)) -lt "$deadline" ]; do
        s=$(timeout 20 "$sc" status "$id" --json)
        st=$(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["state"], d["step"])' <<<"$s" 2>/dev/null)
        case $st in
        running*) [ "${st#running }" -ge $((steps * 2 / 3)) ] && break ;;
        succeeded* | failed* | cancelled*) break ;;
        esac
        sleep 0.5
    done
    if [ $((SECONDS - t0)) -ge "$deadline" ]; then
        echo "gpu_job: $n worker(s): the job did not get far within ${deadline} s (last: $st)"
        timeout 20 "$sc" status "$id" || true
        logs_tail 40
        timeout 20 "$sc" cancel "$id" >/dev/null 2>&1 || true
        continue
    fi
    timeout 60 "$sc" trace "$id" --out "$out/trace-$n.json" --iterations 3 >"$work/trace.log" 2>&1 ||
        echo "gpu_job: no trace for $n worker(s): $(tail -n 1 "$work/trace.log")"
    timeout "$deadline" "$sc" status "$id" --follow >/dev/null 2>&1 || true
    "$sc" status "$id" --json >"$out/status-$n.json"
    "$sc" status "$id" >"$out/status-$n.txt"
    python3 - "$out/status-$n.json" "$n" "$precision" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
spec = d.get("spec") or {}
model = spec.get("model", {}) if isinstance(spec, dict) else {}
T = model.get("seq_len", 1)
batch = spec.get("batch_size", 0) if isinstance(spec, dict) else 0
m, p = d.get("measured_iteration_s") or 0, d.get("predicted_iteration_s") or 0
print(f"gpu_job: {sys.argv[2]} worker(s), {sys.argv[3]}: {d['state']} at step {d['step']}: "
      f"iteration {m:.4f} s measured, {p:.4f} s predicted ({(m / p - 1) * 100 if p else 0:+.1f}%), "
      f"{batch * T / m if m else 0:.0f} tokens/s")
for s in d.get("stage_figures", []):
    print(f"gpu_job:   stage {s['stage']} blocks {s['first_block']}-{s['last_block']}: busy "
          f"{s.get('busy_s', 0):.4f} s ({s.get('busy_fraction', 0) * 100:.0f}%), predicted compute "
          f"{s.get('predicted_compute_s', 0):.4f} s")
PY
    [ -f "$out/trace-$n.json" ] && python3 - "$out/trace-$n.json" "$n" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
acc = collections.defaultdict(list)
for e in ev:
    if e.get("ph") == "X" and e.get("cat") != "planned":
        kind = e["name"].split(" ")[0]  # "forward 3": the kind, over every micro-batch
        acc[(names.get(e["pid"], e["pid"]), kind)].append(e["dur"] / 1e3)
for (who, what), v in sorted(acc.items(), key=lambda kv: str(kv[0])):
    print(f"gpu_job:   trace ({sys.argv[2]} worker(s)) {who}: {what} {len(v)}x, mean {sum(v) / len(v):.2f} ms")
PY
    case $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' "$out/status-$n.json" 2>/dev/null) in
    succeeded) ;;
    *) logs_tail 40 ;;
    esac
    cp "$work/coord.log" "$out/coord-$n.log" 2>/dev/null || true
done
stop_all
