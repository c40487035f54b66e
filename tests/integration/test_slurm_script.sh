#!/usr/bin/env bash
# deploy/slurm/stagecraft-workers.sbatch without a Slurm cluster: `srun` and `stagecraft` are
# fakes on PATH that record what they are asked, and Slurm's variables are set by hand. One
# worker per GPU Slurm allocated, named and given a state folder after the GPU's index on the
# node (SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES, SLURM_GPUS_ON_NODE, a one-node job's
# SLURM_JOB_GPUS), where none a CPU worker per NUMA node that `stagecraft topo --cpu-workers`
# lists (bound with --numa-node, one worker for one node or STAGECRAFT_CPU_WORKERS=one); a failed worker's exit status becomes the script's
# (at once with the default, after the others end with STAGECRAFT_ON_WORKER_FAILURE=keep);
# no coordinator address or join token: exit 2 saying what to set. test_slurm runs it on a real
# cluster.
# Usage: test_slurm_script.sh PATH/TO/stagecraft   (the binary is not used)
sc=${1:?usage: test_slurm_script.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
script=$(cd "$(dirname "$0")/../../deploy/slurm" && pwd)/stagecraft-workers.sbatch
host=$(hostname -s)

mkdir -p "$work/bin"
# srun: runs its command once, here (one node)
cat >"$work/bin/srun" <<'EOF'
#!/bin/bash
while [ $# -gt 0 ] && [ "$1" != bash ]; do shift; done
exec "$@"
EOF
# stagecraft: `topo --cpu-workers` prints the NUMA nodes $FAKE_NUMA_NODES (default 0); a worker
# records its arguments; the worker of device $FAKE_FAIL_DEVICE exits 3 after a moment, the
# others run until SIGTERM
cat >"$work/bin/stagecraft" <<'EOF'
#!/bin/bash
if [ "$1" = topo ]; then printf '%s\n' ${FAKE_NUMA_NODES:-0}; exit 0; fi
echo "$*" >>"$FAKE_LOG"
echo "$STAGECRAFT_COORDINATOR $STAGECRAFT_JOIN_TOKEN" >>"$FAKE_LOG.env"
if [ "$3" = "${FAKE_FAIL_DEVICE:-}" ]; then sleep 0.5; exit 3; fi
trap 'exit 0' TERM
while :; do sleep 0.1; done
EOF
chmod +x "$work/bin/srun" "$work/bin/stagecraft"

# run ENV...: runs the script with ENV (and a stop after 3 s unless it ended); sets out, rc
run() {
    rm -f "$work/fake.log" "$work/fake.log.env"
    out=$(env -u SLURM_STEP_GPUS -u SLURM_JOB_GPUS -u CUDA_VISIBLE_DEVICES -u SLURM_GPUS_ON_NODE \
        -u SLURM_JOB_NUM_NODES -u STAGECRAFT_COORDINATOR -u STAGECRAFT_JOIN_TOKEN \
        PATH="$work/bin:$PATH" FAKE_LOG="$work/fake.log" STAGECRAFT_BIN=stagecraft \
        STAGECRAFT_STATE_ROOT="$work/st" HOME="$work/home" "$@" \
        timeout -k 5 3 bash "$script" 2>&1)
    rc=$?
}
# workers: "DEVICE NAME STATE" per worker started, sorted
workers() {
    [ -f "$work/fake.log" ] || return
    sed 's/.*--device \([^ ]*\) --name \([^ ]*\) --state \([^ ]*\) .*/\1 \2 \3/' "$work/fake.log" |
        sed "s|$work/st/||" | sort | tr '\n' ';'
}
expect() { # expect WHAT WANTED_WORKERS
    if [ "$(workers)" = "$2" ]; then
        pass "$1: $2"
    else
        fail "$1: started '$(workers)', wanted '$2' ($out)"
    fi
}
ok=(STAGECRAFT_COORDINATOR=10.0.0.1:7070 STAGECRAFT_JOIN_TOKEN=t)

run "${ok[@]}" SLURM_STEP_GPUS=2,3 CUDA_VISIBLE_DEVICES=0,1
expect "SLURM_STEP_GPUS=2,3" "cuda:0 $host-cuda2 $host-cuda2;cuda:1 $host-cuda3 $host-cuda3;"
[ -d "$work/st/$host-cuda2" ] && [ -d "$work/st/$host-cuda3" ] && pass "their state folders are made" ||
    fail "no state folders: $(ls "$work/st")"
[ $rc -eq 124 ] && pass "healthy workers keep the job running" || fail "the script ended ($rc): $out"
run "${ok[@]}" CUDA_VISIBLE_DEVICES=4,5,6
expect "CUDA_VISIBLE_DEVICES=4,5,6" "cuda:0 $host-cuda4 $host-cuda4;cuda:1 $host-cuda5 $host-cuda5;cuda:2 $host-cuda6 $host-cuda6;"
run "${ok[@]}" SLURM_GPUS_ON_NODE=2
expect "SLURM_GPUS_ON_NODE=2" "cuda:0 $host-cuda0 $host-cuda0;cuda:1 $host-cuda1 $host-cuda1;"
run "${ok[@]}" SLURM_JOB_GPUS=7 SLURM_JOB_NUM_NODES=1
expect "a one-node job's SLURM_JOB_GPUS=7" "cuda:0 $host-cuda7 $host-cuda7;"
run "${ok[@]}" SLURM_JOB_GPUS=7 SLURM_JOB_NUM_NODES=2
expect "another node's SLURM_JOB_GPUS is not this node's" "cpu $host-cpu $host-cpu;"
run "${ok[@]}" CUDA_VISIBLE_DEVICES=NoDevFiles
expect "no GPU allocated" "cpu $host-cpu $host-cpu;"
run "${ok[@]}" FAKE_NUMA_NODES="0 1"
expect "no GPU, two NUMA nodes" "cpu $host-cpu-numa0 $host-cpu-numa0;cpu $host-cpu-numa1 $host-cpu-numa1;"
[ "$(grep -c -- "--numa-node" "$work/fake.log")" -eq 2 ] && grep -q -- "-numa0 .*--numa-node 0$" "$work/fake.log" &&
    grep -q -- "-numa1 .*--numa-node 1$" "$work/fake.log" && pass "each is bound to its node" ||
    fail "the CPU workers were started as: $(cat "$work/fake.log")"
run "${ok[@]}" FAKE_NUMA_NODES="0 1" STAGECRAFT_CPU_WORKERS=one
expect "STAGECRAFT_CPU_WORKERS=one" "cpu $host-cpu $host-cpu;"
run "${ok[@]}" FAKE_NUMA_NODES="0 1" SLURM_STEP_GPUS=0
expect "GPU workers are not split by node" "cuda:0 $host-cuda0 $host-cuda0;"

# failures
run "${ok[@]}" SLURM_STEP_GPUS=0,1 FAKE_FAIL_DEVICE=cuda:1
[ $rc -eq 3 ] && echo "$out" | grep -q "worker $host-cuda1 exited with status 3" &&
    pass "a failed worker: the script exits with its status at once, naming it" ||
    fail "a failed worker: exit $rc: $out"
rm -f "$work/keep.out"
(env -u SLURM_STEP_GPUS PATH="$work/bin:$PATH" FAKE_LOG="$work/fake.log" STAGECRAFT_STATE_ROOT="$work/st" \
    "${ok[@]}" SLURM_STEP_GPUS=0,1 FAKE_FAIL_DEVICE=cuda:1 STAGECRAFT_BIN=stagecraft \
    STAGECRAFT_ON_WORKER_FAILURE=keep bash "$script" >"$work/keep.out" 2>&1) &
keep_pid=$!
pids+=("$keep_pid")
wait_for 20 grep -q "exited with status 3" "$work/keep.out" || fail "keep: no failure reported: $(cat "$work/keep.out")"
if running "$keep_pid"; then
    pass "STAGECRAFT_ON_WORKER_FAILURE=keep: the other worker runs on"
    kill -TERM "$keep_pid"
else
    fail "keep: the script ended with the failed worker"
fi
wait "$keep_pid"
rc=$?
[ $rc -eq 3 ] && pass "keep: stopped, the script still exits with the failed worker's status" ||
    fail "keep: exit $rc"

# settings
run STAGECRAFT_JOIN_TOKEN=t
[ $rc -eq 2 ] && echo "$out" | grep -q "no coordinator address.*STAGECRAFT_COORDINATOR" &&
    pass "no coordinator address: exit 2: $out" || fail "no coordinator address: exit $rc: $out"
run STAGECRAFT_COORDINATOR=10.0.0.1:7070
[ $rc -eq 2 ] && echo "$out" | grep -q "no join token.*STAGECRAFT_JOIN_TOKEN" &&
    pass "no join token: exit 2: $out" || fail "no join token: exit $rc: $out"
mkdir -p "$work/home/stagecraft-coordinator"
echo 10.0.0.2:7070 >"$work/home/stagecraft-coordinator/coordinator.addr"
echo filetoken >"$work/home/stagecraft-coordinator/join.token"
run STAGECRAFT_ON_WORKER_FAILURE=keep
[ "$(cat "$work/fake.log.env")" = "10.0.0.2:7070 filetoken" ] &&
    pass "without settings, the address and the token come from the coordinator's folder" ||
    fail "the worker got '$(cat "$work/fake.log.env")': $out"
run "${ok[@]}" STAGECRAFT_ON_WORKER_FAILURE=sometimes
[ $rc -eq 2 ] && echo "$out" | grep -q "valid: stop, keep" && pass "a bad setting is named: $out" ||
    fail "STAGECRAFT_ON_WORKER_FAILURE=sometimes: exit $rc: $out"
run "${ok[@]}" STAGECRAFT_CPU_WORKERS=many
[ $rc -eq 2 ] && echo "$out" | grep -q "valid: numa, one" && pass "a bad STAGECRAFT_CPU_WORKERS is named: $out" ||
    fail "STAGECRAFT_CPU_WORKERS=many: exit $rc: $out"

finish
