#!/usr/bin/env bash
# `make lab-demo`: an uneven lab (deploy/lab/uneven.json: two servers, four CPU workers capped
# at 0.45, 0.45, 0.25 and 0.15 of a core) trains a small GPT planned with the hetero strategy,
# which gives the slow workers less (or nothing). Shows the workers, follows the job, prints
# its status (plan, measured against predicted iteration time), writes a measured trace when
# the build has `stagecraft trace`, and takes the lab down again, whatever happens.
# Usage: demo.sh PATH/TO/stagecraft [STEPS [KERNELS]]   (as root; KERNELS: the job's cpu_kernels,
#        fast (default) or reference)
set -euo pipefail
sc=$(readlink -f "${1:?usage: demo.sh PATH/TO/stagecraft [STEPS [KERNELS]]}")
steps=${2:-200}
kernels=${3:-fast}
case $kernels in fast | reference) ;; *) echo "lab-demo: kernels '$kernels': expected fast or reference" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
trace=$(dirname "$(dirname "$sc")")/lab-trace.json # beside the build's other outputs
rm -f "$trace"
lab=$here/lab
[ "$(id -u)" -eq 0 ] || { echo "lab-demo: run as root (the lab makes namespaces, links and cgroups)" >&2; exit 2; }

trap '"$lab" down uneven >/dev/null 2>&1 || true' EXIT
"$lab" up "$here/uneven.json" --bin "$sc"
eval "$("$lab" env uneven)"
echo
"$lab" status uneven

job=$(mktemp /tmp/stagecraft-lab-job.XXXXXX.json)
cat >"$job" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "lab-demo",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 64, "layers": 8, "width": 128, "heads": 4,
           "cpu_kernels": "$kernels"},
 "data": {"kind": "synthetic"}, "batch_size": 16, "microbatches": 4, "schedule": "1f1b",
 "strategy": "hetero", "workers": 4, "steps": $steps, "seed": 7,
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
# every worker alive before the job asks for four
for _ in $(seq 1 200); do
    [ "$("$sc" workers --json | grep -c '"state": "alive"')" -ge 4 ] && break
    sleep 0.1
done
echo
"$sc" workers
echo
id=$("$sc" submit "$job" --json | sed -n 's/.*"job_id": "\([^"]*\)".*/\1/p')
rm -f "$job"
echo "submitted $id: a GPT of 8 layers, hetero strategy, $steps steps"
if "$sc" help trace >/dev/null 2>&1; then
    # a trace of the running job, once it has run a few steps
    while st=$("$sc" status "$id" --json) &&
        [ "$(jq -r .step <<<"$st")" -lt 20 ] &&
        [[ "$(jq -r .state <<<"$st")" =~ ^(submitted|profiling|planned|running)$ ]]; do
        sleep 0.2
    done
    "$sc" trace "$id" --out "$trace" || true
fi
rc=0
"$sc" status "$id" --follow || rc=$?
echo
"$sc" status "$id"
[ -f "$trace" ] && echo "the measured and planned timelines: $trace (open it in ui.perfetto.dev)"
exit $rc
