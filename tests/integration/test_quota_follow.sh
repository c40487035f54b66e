#!/usr/bin/env bash
# A worker's CPU kernels follow its cgroup's CPU quota when it changes while the worker runs (a
# Kubernetes in-place resize, `docker update --cpus`, `systemctl set-property CPUQuota=`), as
# they follow it at start: a worker started in a cgroup of one core runs one thread; the quota
# raised to two cores mid-job, its stage uses two from the next steps; lowered again, one.
# Needs root, a cgroup CPU controller (v1 or v2) and two cores: exit 77 (skipped) otherwise.
# Usage: test_quota_follow.sh PATH/TO/stagecraft
sc=${1:?usage: test_quota_follow.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "skipped: needs root (a cgroup of its own)"; exit 77; }
[ "$(nproc)" -ge 2 ] || { echo "skipped: needs two cores"; exit 77; }
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then # v2
    cg=/sys/fs/cgroup/stagecraft-quota-$$
    grep -qw cpu /sys/fs/cgroup/cgroup.controllers || { echo "skipped: no cpu controller"; exit 77; }
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    mkdir "$cg" 2>/dev/null || { echo "skipped: cannot make a cgroup"; exit 77; }
    set_cores() { echo "$(($1 * 100000)) 100000" >"$cg/cpu.max"; }
elif [ -d /sys/fs/cgroup/cpu ]; then # v1
    cg=/sys/fs/cgroup/cpu/stagecraft-quota-$$
    mkdir "$cg" 2>/dev/null || { echo "skipped: cannot make a cgroup"; exit 77; }
    set_cores() { echo 100000 >"$cg/cpu.cfs_period_us" && echo "$(($1 * 100000))" >"$cg/cpu.cfs_quota_us"; }
else
    echo "skipped: no cgroup CPU controller"
    exit 77
fi
# lib.sh's cleanup ends the processes; the cgroup goes once they have
remove_cg() {
    cleanup
    rmdir "$cg" 2>/dev/null || true
}
trap remove_cg EXIT
set_cores 1 || { echo "skipped: the quota cannot be written"; exit 77; }
# a process can join the cgroup (a delegated or nested hierarchy may refuse it)
bash -c 'echo $$ >"$1/cgroup.procs"' _ "$cg" 2>/dev/null ||
    { echo "skipped: a process cannot join the cgroup"; exit 77; }

start_coordinator coord "$work/state"
# the worker starts inside the cgroup: its shell joins it, then becomes the worker
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
    "$sc" worker --name q --state "$work/wstate" >>"$work/q.log" 2>&1 &
pids+=($!)
wait_alive 20 1 || fail "the worker did not register"

cat >"$work/job.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "quota",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 32, "layers": 2, "width": 64, "heads": 4},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "workers": 1,
 "steps": 1000000, "rebalance": "off"}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 running || fail "the job is $(job_state job-1)"
set_cores 2
wait_for 30 grep -q "the CPU quota changed; the kernels use 2 threads" "$work/q.log" &&
    pass "quota raised to 2 cores mid-job: the stage's kernels use 2 threads" ||
    fail "no change to 2 threads: $(grep -i "thread" "$work/q.log" | tail -n 3)"
set_cores 1
wait_for 30 grep -q "the CPU quota changed; the kernels use 1 thread " "$work/q.log" &&
    pass "quota lowered to 1 core: back to 1 thread" ||
    fail "no change back to 1 thread: $(grep -i "thread" "$work/q.log" | tail -n 3)"
is_state job-1 running || fail "the job is $(job_state job-1) after the resizes"
"$sc" cancel job-1 --reason "test over" >/dev/null 2>&1
finish
