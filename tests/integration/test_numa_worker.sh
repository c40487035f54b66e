#!/usr/bin/env bash
# `stagecraft worker --numa-node N` binds the worker to a NUMA node before it starts: every
# thread of the running worker (the BLAS's pool that started with the process, gRPC's and
# ZeroMQ's threads) has the node's CPUs as its affinity, the CPU kernels' thread count follows,
# and two such workers get names of their own (HOST-cpu-numaN). A node the machine lacks, or a
# value that is no node, is refused with exit status 2 naming the valid nodes. No coordinator
# is needed: a worker keeps retrying its registration, bound, while it is looked at.
# The two-node case runs on a two-node machine described to hwloc (HWLOC_SYNTHETIC, with
# HWLOC_THISSYSTEM=1 so that hwloc binds on it) over CPUs 0 and 1 of this one: binding to node 1
# must leave CPU 1 alone, and the kernel refuses memory on a node it does not have, so the
# worker says so once and keeps its CPU binding. That part needs CPUs 0 and 1 (skipped without).
# Usage: test_numa_worker.sh PATH/TO/stagecraft
sc=${1:?usage: test_numa_worker.sh PATH/TO/stagecraft}
sc=$(cd "$(dirname "$sc")" && pwd)/$(basename "$sc")
. "$(dirname "$0")/lib.sh"
export STAGECRAFT_JOIN_TOKEN=t STAGECRAFT_COORDINATOR=127.0.0.1:1

# the nodes `stagecraft topo` offers, as the refusal should list them: "0" or "0, 1"
nodes=$("$sc" topo --cpu-workers | paste -sd, | sed 's/,/, /g')
[ -n "$nodes" ] && pass "topo --cpu-workers lists NUMA node(s) $nodes" || fail "topo --cpu-workers listed none"
plural=s
[[ $nodes == *,* ]] || plural=

refused() { # refused WANTED_FIRST_LINE ARGS...
    local want=$1 err rc
    shift
    err=$("$sc" worker --state "$work/refused" "$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -eq 2 ] && [ "$(head -n 1 <<<"$err")" = "$want" ]; then
        pass "worker $*: exit 2: $want"
    else
        fail "worker $*: exit $rc, want 2 and '$want': $err"
    fi
}
refused "stagecraft worker: --numa-node 7: this machine has NUMA node$plural $nodes" --numa-node 7
refused "stagecraft worker: --numa-node: '-1' is not an integer in [0, 2147483647]" --numa-node -1
refused "stagecraft worker: --numa-node: 'zero' is not an integer in [0, 2147483647]" --numa-node zero

# start_bound NAME ARGS...: starts a worker in its own folder (its default name); sets wpid once
# it serves, with its log in $work/NAME.log
start_bound() {
    local name=$1
    shift
    mkdir -p "$work/$name"
    (cd "$work/$name" && exec "$sc" --log-level info worker "$@" >"$work/$name.log" 2>&1) &
    wpid=$!
    pids+=("$wpid")
    wait_for 30 grep -q "serving on" "$work/$name.log" || fail "$name did not start: $(cat "$work/$name.log")"
}
# affinities PID: the distinct Cpus_allowed_list of its threads, one a line
affinities() { for t in /proc/"$1"/task/*/status; do sed -n 's/^Cpus_allowed_list:\t//p' "$t"; done | sort -u; }
# bound_cpus LOG: the CPUs the worker says it is bound to
bound_cpus() { sed -n 's/.*--numa-node [0-9]*: bound to CPUs \([0-9,-]*\) .*/\1/p' "$1"; }
host=$(hostname)
mine=$(sed -n 's/^Cpus_allowed_list:\t//p' /proc/self/status)

# node 0 of this machine
start_bound real --numa-node 0
cpus=$(bound_cpus "$work/real.log")
want=$mine
if [ -r /sys/devices/system/node/node1/cpulist ]; then
    # several nodes: node 0's CPUs, when this shell may use every CPU (else the intersection,
    # which is not worked out here)
    want=$(cat /sys/devices/system/node/node0/cpulist)
    [ "$mine" = "$(cat /sys/devices/system/cpu/online)" ] || want=$cpus
fi
[ "$cpus" = "$want" ] && pass "--numa-node 0: bound to CPUs $cpus" || fail "--numa-node 0: bound to '$cpus', want '$want': $(cat "$work/real.log")"
got=$(affinities "$wpid")
n_threads=$(ls /proc/"$wpid"/task | wc -l)
[ -n "$cpus" ] && [ "$got" = "$cpus" ] && pass "all $n_threads threads of the worker run on CPUs $cpus" ||
    fail "the worker's threads run on: $got (want $cpus)"
[ -e "$work/real/worker-$host-cpu-numa0.lock" ] && pass "its name is $host-cpu-numa0" ||
    fail "no worker-$host-cpu-numa0.lock: $(ls "$work/real")"
kill -TERM "$wpid"
wait "$wpid" && pass "it stops on SIGTERM with status 0" || fail "it stopped with status $?"

# has_cpu LIST N: CPU N is in the cpulist LIST ("0-3,8")
has_cpu() {
    local r a b
    IFS=, read -r -a ranges <<<"$1"
    for r in "${ranges[@]}"; do
        a=${r%-*} b=${r#*-}
        [ "$2" -ge "$a" ] && [ "$2" -le "$b" ] && return 0
    done
    return 1
}

# node 1 of a two-node machine drawn over CPUs 0 and 1
if ! has_cpu "$mine" 0 || ! has_cpu "$mine" 1; then
    echo "skip: the two-node case needs CPUs 0 and 1 (this shell has $mine)"
else
    export HWLOC_SYNTHETIC="package:2 numa:1 core:1 pu:1" HWLOC_THISSYSTEM=1
    [ "$("$sc" topo --cpu-workers | paste -sd,)" = 0,1 ] && pass "two synthetic nodes: topo --cpu-workers says 0 and 1" ||
        fail "two synthetic nodes: topo --cpu-workers says $("$sc" topo --cpu-workers)"
    refused "stagecraft worker: --numa-node 2: this machine has NUMA nodes 0, 1" --numa-node 2
    start_bound two --numa-node 1
    [ "$(bound_cpus "$work/two.log")" = 1 ] && pass "--numa-node 1: bound to CPU 1" ||
        fail "--numa-node 1: $(cat "$work/two.log")"
    got=$(affinities "$wpid")
    [ "$got" = 1 ] && pass "all $(ls /proc/"$wpid"/task | wc -l) threads of the worker run on CPU 1 only" ||
        fail "the worker's threads run on: $got"
    grep -q "the CPU kernels use 1 thread$" "$work/two.log" && pass "its CPU kernels use 1 thread (the node's)" ||
        fail "thread count: $(grep "bound to" "$work/two.log")"
    [ "$(grep -c "memory binding refused" "$work/two.log")" -eq 1 ] &&
        pass "memory on a node the kernel lacks: said once, CPUs stay bound" ||
        fail "memory refusal not said once: $(cat "$work/two.log")"
    kill -TERM "$wpid"
    wait "$wpid" || fail "the two-node worker stopped with status $?"
    unset HWLOC_SYNTHETIC HWLOC_THISSYSTEM
fi
finish
