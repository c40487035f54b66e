#!/usr/bin/env bash
# The uneven lab (deploy/lab/lab): a lab file builds servers as network namespaces on a bridge
# with shaped uplinks and workers in CPU cgroups; real coordinator and worker processes register
# from their namespaces under their servers' host names and train a job across the emulated
# links; `lab set` changes CPU shares, cores and link rates live; bad lab files are refused
# naming the key and create nothing; `lab down` leaves nothing behind, also after `lab up` was
# killed half-way, and is safe to run twice.
# Needs root, iproute2, jq and a cgroup CPU controller: skipped (exit 77) without them.
# Usage: test_lab.sh PATH/TO/stagecraft
sc=${1:?usage: test_lab.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
need_lab taskset

# a lab of this test's own: its name and subnet do not clash with a lab a user has up
export STAGECRAFT_LAB_RUN=$work/run
name=t$((RANDOM % 10000))
subnet=198.19.$((100 + RANDOM % 150)).0/24
base=${subnet%.0/24}
cat >"$work/lab.json" <<JSON
{"format": "stagecraft-lab", "version": 1, "name": "$name", "subnet": "$subnet",
 "servers": [{"name": "a", "rate": "1gbit"}, {"name": "b", "rate": "100mbit"}],
 "workers": [{"name": "a0", "server": "a", "cpu": 0.5},
             {"name": "b0", "server": "b", "cpu": 0.25, "cores": "0"}]}
JSON

# leftovers NAME: what of lab NAME still exists (namespaces, links, cgroups, run folder), one
# line each; empty when nothing is left
leftovers() {
    ip netns list | awk '{ print $1 }' | grep -E "^scl-$1-" | sed 's/^/namespace /'
    ip -o link show | awk -F': ' '{ print $2 }' | sed 's/@.*//' | grep -E "^scl-$1(-|$)" | sed 's/^/link /'
    find /sys/fs/cgroup -maxdepth 3 -name "stagecraft-lab-$1" 2>/dev/null | sed 's/^/cgroup /'
    [ -e "$STAGECRAFT_LAB_RUN/$1" ] && echo "run folder"
    true
}
down_on_exit() { "$lab" down "$name" >/dev/null 2>&1; "$lab" down "${name}k" >/dev/null 2>&1; cleanup; }
trap down_on_exit EXIT

# 1. bad lab files are refused (exit 2), naming the key, and make nothing
bad() { # WHAT JQ-EDIT EXPECTED-TEXT
    jq "$2" "$work/lab.json" >"$work/bad.json"
    local out rc
    out=$("$lab" up "$work/bad.json" --bin "$sc" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$3" <<<"$out" && [ -z "$(leftovers "$name")" ] &&
        pass "$1 refused: $out" || fail "$1: rc $rc, '$out', left: $(leftovers "$name")"
}
bad "a wrong format" '.format = "stagecraft-job"' "format: 'stagecraft-job' is not 'stagecraft-lab'"
bad "a worker on no server" '.workers[1].server = "c"' "workers\[1\].server: 'c' is not one of the servers (a, b)"
bad "a bad rate" '.servers[0].rate = "fast"' "servers\[0\].rate: 'fast' must be a rate"
bad "a CPU share of 0" '.workers[0].cpu = 0' "workers\[0\].cpu: '0' must be a share"
bad "a long name" '.name = "muchtoolong"' "name: 'muchtoolong' must be 1-8"

# 2. up: the processes run in their namespaces and cgroups, under their servers' host names
"$lab" up "$work/lab.json" --bin "$sc" >"$work/up.log" 2>&1 || fail "lab up: $(cat "$work/up.log")"
eval "$("$lab" env "$name")"
[ "$STAGECRAFT_COORDINATOR" = "$base.2:7070" ] && pass "clients reach the coordinator at $base.2:7070" ||
    fail "lab env gave coordinator '$STAGECRAFT_COORDINATOR'"
wait_alive 60 2 && pass "both workers registered from their namespaces" || fail "workers: $("$sc" workers)"
run=$STAGECRAFT_LAB_RUN/$name
host_of() { "$sc" workers --json | jq -r ".workers[] | select(.name == \"$1\") | .host"; }
[ "$(host_of a0)" = a ] && [ "$(host_of b0)" = b ] && pass "workers report their servers' host names" ||
    fail "hosts: a0 '$(host_of a0)', b0 '$(host_of b0)'"
for w in a0:a b0:b coordinator:coordinator; do
    p=$(cat "$run/pids/${w%%:*}")
    [ "$(ip netns identify "$p")" = "scl-$name-${w#*:}" ] && pass "${w%%:*} (pid $p) runs in scl-$name-${w#*:}" ||
        fail "${w%%:*} (pid $p) is in namespace '$(ip netns identify "$p")'"
done
# quota QUOTA PERIOD of a worker's cgroup, as the kernel holds it
quota() {
    local d
    d=$(find /sys/fs/cgroup -maxdepth 3 -path "*stagecraft-lab-$name/$1" | head -n 1)
    if [ -f "$d/cpu.max" ]; then cat "$d/cpu.max"; else echo "$(cat "$d/cpu.cfs_quota_us") $(cat "$d/cpu.cfs_period_us")"; fi
}
cg_has() { # WORKER: its pid is listed in its cgroup
    local d
    d=$(find /sys/fs/cgroup -maxdepth 3 -path "*stagecraft-lab-$name/$1" | head -n 1)
    grep -qx "$(cat "$run/pids/$1")" "$d/cgroup.procs"
}
[ "$(quota a0)" = "2500 5000" ] && [ "$(quota b0)" = "1250 5000" ] && cg_has a0 && cg_has b0 &&
    pass "CPU shares 0.5 and 0.25 are CFS quotas of a 5 ms period" || fail "quotas: a0 '$(quota a0)', b0 '$(quota b0)'"
[ "$(taskset -p "$(cat "$run/pids/b0")" | awk '{ print $NF }')" = 1 ] && pass "b0 is pinned to core 0" ||
    fail "b0's affinity: $(taskset -p "$(cat "$run/pids/b0")")"
rate_in() { ip netns exec "scl-$name-$1" tc qdisc show dev eth0 | grep -o 'rate [0-9]*[KMG]bit'; }
rate_out() { tc qdisc show dev "scl-$name-$2" | grep -o 'rate [0-9]*[KMG]bit'; }
[ "$(rate_in a)" = "rate 1Gbit" ] && [ "$(rate_in b)" = "rate 100Mbit" ] && [ "$(rate_out b 1)" = "rate 100Mbit" ] &&
    pass "uplinks are paced at 1gbit and 100mbit both ways" || fail "rates: a '$(rate_in a)', b '$(rate_in b)' / '$(rate_out b 1)'"

# 3. a job trains across the two servers, over the shaped links
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "lab",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 64, "layers": 4, "width": 128, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 20, "seed": 3,
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 succeeded && pass "a 2-stage job trained across the servers" ||
    fail "job-1 is $(job_state job-1): $("$sc" status job-1)"
# inside a server's namespace a worker cannot read its cgroup's quota: the lab gives it the
# threads of its share (else it spends the quota on threads waiting for each other)
grep -q "CPU kernels: 1 threads" "$run/logs/a0.log" && grep -q "CPU kernels: 1 threads" "$run/logs/b0.log" &&
    pass "workers at 0.5 and 0.25 of a core run one kernel thread" ||
    fail "threads: $(grep -h "CPU kernels" "$run/logs/a0.log" "$run/logs/b0.log")"
# the profiles the plan was made from: under a quota, a block's time is its share of the CPU
# time of passes that took what the quota allowed, so the four equal layers measure alike
# (their own wall times scatter with the stalls: 12-32 ms around a mean of 21 at 0.25)
spread=$("$sc" status job-1 --json | jq -r '.plan.cluster.device_types | to_entries[] | .key as $type |
    [.value.block_times | to_entries[] | select(.key | startswith("layer")) |
     .value.forward_s + .value.backward_s] | (add / length) as $m |
    "\($type) \(map(. / $m) | min) \(map(. / $m) | max)"')
[ "$(wc -l <<<"$spread")" = 2 ] && awk '$2 < 0.75 || $3 > 1.25 { bad = 1 } END { exit bad }' <<<"$spread" &&
    pass "each worker's equal layers profile within 25% of their mean: $(tr '\n' ';' <<<"$spread")" ||
    fail "layers' times over their mean (type, least, most): $(tr '\n' ';' <<<"$spread")"

# 4. set: live changes of shares, cores and rates; bad settings refused
"$lab" set --lab "$name" b0 cpu=0.3 && [ "$(quota b0)" = "1500 5000" ] && pass "set b0 cpu=0.3" ||
    fail "after cpu=0.3: '$(quota b0)'"
"$lab" set --lab "$name" b0 cpu=0.1 && [ "$(quota b0)" = "1000 10000" ] &&
    "$lab" set --lab "$name" b0 cpu=0.05 && [ "$(quota b0)" = "1000 20000" ] &&
    pass "a share under 0.2 lengthens the period (the kernel's least quota is 1 ms)" ||
    fail "after cpu=0.1 and 0.05: '$(quota b0)'"
"$lab" set --lab "$name" a0 cores=1 && [ "$(taskset -p "$(cat "$run/pids/a0")" | awk '{ print $NF }')" = 2 ] &&
    pass "set a0 cores=1" || fail "a0's affinity: $(taskset -p "$(cat "$run/pids/a0")")"
"$lab" set --lab "$name" b rate=10mbit && [ "$(rate_in b)" = "rate 10Mbit" ] && [ "$(rate_out b 1)" = "rate 10Mbit" ] &&
    pass "set b rate=10mbit" || fail "after rate=10mbit: '$(rate_in b)' / '$(rate_out b 1)'"
out=$("$lab" set --lab "$name" b0 rate=1mbit 2>&1)
[ $? -eq 2 ] && grep -q "b0 is a worker" <<<"$out" && pass "a link setting on a worker is refused" || fail "'$out'"
out=$("$lab" set --lab "$name" b cpu=0.5 2>&1)
[ $? -eq 2 ] && grep -q "b is a server" <<<"$out" && pass "a CPU setting on a server is refused" || fail "'$out'"
wait_alive 30 2 && pass "both workers still alive after the changes" || fail "workers: $("$sc" workers)"

# 5. down leaves nothing, and runs twice
pids=("$(cat "$run/pids/a0")" "$(cat "$run/pids/b0")" "$(cat "$run/pids/coordinator")")
"$lab" down "$name" >/dev/null || fail "lab down"
left=$(leftovers "$name")
[ -z "$left" ] && pass "down removed every namespace, link, cgroup and the run folder" || fail "left: $left"
alive_pids=""
for p in "${pids[@]}"; do running "$p" && alive_pids+=" $p"; done
[ -z "$alive_pids" ] && pass "down stopped the coordinator and workers" || fail "still running:$alive_pids"
"$lab" down "$name" >/dev/null && pass "down runs twice" || fail "a second down failed"

# 6. up killed half-way: down still removes all it made
kname=${name}k
jq ".name = \"$kname\"" "$work/lab.json" >"$work/kill.json"
"$lab" up "$work/kill.json" --bin "$sc" >"$work/killed-up.log" 2>&1 &
up_pid=$!
wait_for 60 test -s "$STAGECRAFT_LAB_RUN/$kname/pids/coordinator" || true # a process has started
kill -KILL "$up_pid" 2>/dev/null
wait "$up_pid" 2>/dev/null
kpids=()
for f in "$STAGECRAFT_LAB_RUN/$kname"/pids/*; do [ -f "$f" ] && kpids+=("$(cat "$f")"); done
"$lab" down "$kname" >/dev/null || fail "down after a killed up"
left=$(leftovers "$kname")
[ -z "$left" ] && pass "down after a killed up left nothing (${#kpids[@]} processes had started)" || fail "left: $left"
for p in "${kpids[@]}"; do running "$p" && fail "pid $p of the killed lab still runs"; done

finish
