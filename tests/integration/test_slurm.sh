#!/usr/bin/env bash
# The Slurm scripts of deploy/slurm/, unedited, on a single-node Slurm cluster that this test
# starts (munged, slurmctld and slurmd from Debian's munge and slurm-wlm, configured in a
# scratch folder, each PID kept and stopped at the end): the coordinator runs as a Slurm job,
# the workers' job registers a worker and trains a job; the workers' job is cancelled mid-job
# (the worker tells the coordinator it leaves and Slurm says CANCELLED), submitted again, and
# the job resumes from its checkpoint and succeeds. A workers' job whose worker cannot start
# ends FAILED in Slurm with the worker's exit status.
# Needs root; installs slurm-wlm and munge when missing; skipped (77) where they cannot be had.
# Every wait has a time limit.
# Usage: test_slurm.sh PATH/TO/stagecraft
sc=${1:?usage: test_slurm.sh PATH/TO/stagecraft}
sc=$(cd "$(dirname "$sc")" && pwd)/$(basename "$sc")
. "$(dirname "$0")/lib.sh"
slurm_dir=$(cd "$(dirname "$0")/../../deploy/slurm" && pwd)

if [ "$(id -u)" -ne 0 ]; then
    echo "skip: a Slurm cluster of its own needs root"
    exit 77
fi

# ---- slurm-wlm and munge, from Debian
have_slurm() {
    for c in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
        command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || return 1
    done
}
export PATH=$PATH:/usr/sbin:/sbin
if ! have_slurm; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "skip: Slurm is not installed and there is no apt-get to install it"
        exit 77
    fi
    # the packages' scripts must not start system-wide daemons: the test starts its own
    made_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d &&
            made_policy=1
    fi
    apt_install() {
        DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q --no-install-recommends \
            -o DPkg::Lock::Timeout=120 slurm-wlm munge >"$work/apt.log" 2>&1
    }
    apt_install || { timeout 200 apt-get update -q >>"$work/apt.log" 2>&1 && apt_install; }
    [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
    if ! have_slurm; then
        echo "skip: slurm-wlm and munge cannot be installed: $(tail -n 3 "$work/apt.log")"
        exit 77
    fi
fi

# ---- a single-node cluster in $work/slurm
loopback_only=
[ -n "$(ip -4 -o addr show 2>/dev/null | awk '{print $4}' | grep -v '^127\.')" ] || loopback_only=1
s=$work/slurm
mkdir -p "$s/ctld" "$s/slurmd"
chmod 700 "$work"
# free_port: a TCP port nothing listens on
free_port() {
    local p
    for _ in $(seq 1 100); do
        p=$((20000 + RANDOM % 20000))
        [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ] && { echo "$p"; return; }
    done
    return 1
}
node=$(hostname -s)
ctld_port=$(free_port) && slurmd_port=$(free_port) && coord_port=$(free_port) ||
    { fail "no free TCP port"; exit 1; }
cat >"$s/slurm.conf" <<EOF
ClusterName=sctest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$s/munge.sock
CredType=cred/munge
StateSaveLocation=$s/ctld
SlurmdSpoolDir=$s/slurmd
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=15
MinJobAge=3600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=sctest Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$s/slurm.conf

# every Slurm command with a time limit
sl() { timeout 30 "$@"; }

# Stops what the cluster runs, then the cluster: the jobs first (their workers and coordinator
# are the children of slurmd's step daemons, not ours), then the daemons (in lib.sh's cleanup).
slurm_down() {
    if [ -n "${slurm_up:-}" ]; then
        sl scancel --full --user=root >/dev/null 2>&1
        wait_for 40 sh -c '[ -z "$(timeout 10 squeue -h 2>/dev/null)" ]'
        # a worker the step daemons could not stop (its PID is in its lock file)
        for f in "$work"/wstate/*/worker-*.lock; do
            [ -f "$f" ] || continue
            p=$(cat "$f")
            grep -q stagecraft "/proc/$p/cmdline" 2>/dev/null && kill -KILL "$p" 2>/dev/null
        done
    fi
    cleanup
}
trap slurm_down EXIT

mungekey --create --keyfile="$s/munge.key" >"$s/mungekey.log" 2>&1 ||
    dd if=/dev/urandom of="$s/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$s/munge.key"
munged -F --force --socket="$s/munge.sock" --key-file="$s/munge.key" --pid-file="$s/munged.pid" \
    --seed-file="$s/munged.seed" --log-file="$s/munged.log" >"$work/munged.log" 2>&1 &
pids+=($!)
wait_for 20 test -S "$s/munge.sock" || { fail "munged did not start"; exit 1; }
slurmctld -D -f "$s/slurm.conf" >"$work/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -f "$s/slurm.conf" -N "$node" >"$work/slurmd.log" 2>&1 &
pids+=($!)
slurm_up=1
node_idle() { [ "$(sl sinfo -h -n "$node" -o %t)" = idle ]; }
if wait_for 60 node_idle; then
    pass "a single-node Slurm cluster is up ($(sl sinfo -h -o '%P %D %t %N'))"
elif [ -n "$loopback_only" ]; then
    # Slurm's daemons look their listening address up with AI_ADDRCONFIG, which finds none
    # where loopback is the only interface
    echo "skip: Slurm's daemons do not start on a host whose only interface is loopback: $(tail -n 2 "$work/slurmd.log")"
    exit 77
else
    fail "the Slurm node is not idle: $(sl sinfo -h 2>&1) $(tail -n 5 "$s/slurmctld.log" "$s/slurmd.log")"
    exit 1
fi

# ---- the scripts, unedited; the site knobs come from the environment (sbatch passes it on)
export STAGECRAFT_BIN=$sc
export STAGECRAFT_COORDINATOR_DIR=$work/coordinator
export STAGECRAFT_COORDINATOR_PORT=$coord_port
export STAGECRAFT_STATE_ROOT=$work/wstate
export STAGECRAFT_LOG=info
unset STAGECRAFT_COORDINATOR STAGECRAFT_JOIN_TOKEN STAGECRAFT_TOKEN
# on a host with no address but loopback the coordinator refuses to pick one: this one-node
# cluster can do with loopback
[ -n "$loopback_only" ] && export STAGECRAFT_COORDINATOR_ADVERTISE=127.0.0.1
# submit SCRIPT: sbatch it, print the Slurm job id
submit() { sl sbatch --parsable --chdir="$work" "$slurm_dir/$1" | cut -d';' -f1; }
slurm_state() { sl scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
slurm_exit() { sl scontrol show job "$1" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'; }
is_slurm() { [ "$(slurm_state "$1")" = "$2" ]; }

cjob=$(submit stagecraft-coordinator.sbatch)
addr_file=$STAGECRAFT_COORDINATOR_DIR/coordinator.addr
if wait_for 60 test -s "$addr_file"; then
    pass "the coordinator's Slurm job $cjob runs it and writes its address: $(cat "$addr_file")"
else
    fail "no $addr_file: Slurm job $cjob is $(slurm_state "$cjob"): $(cat "$work"/stagecraft-coordinator-*.out)"
    exit 1
fi
STAGECRAFT_COORDINATOR=$(cat "$addr_file")
STAGECRAFT_TOKEN=$(cat "$STAGECRAFT_COORDINATOR_DIR/client.token")
export STAGECRAFT_COORDINATOR STAGECRAFT_TOKEN
case $STAGECRAFT_COORDINATOR in
127.*) [ -n "${STAGECRAFT_COORDINATOR_ADVERTISE:-}" ] ||
    fail "the coordinator advertises loopback: $STAGECRAFT_COORDINATOR" ;;
esac

wjob=$(submit stagecraft-workers.sbatch)
wait_for 60 worker_is "$node-cpu" alive &&
    pass "the workers' Slurm job $wjob registered worker $node-cpu (its join token read from the coordinator's folder)" ||
    fail "worker $node-cpu is '$(worker_state "$node-cpu")'; Slurm job $wjob is $(slurm_state "$wjob"): $(cat "$work/stagecraft-workers-$wjob.out")"
[ -d "$STAGECRAFT_STATE_ROOT/$node-cpu" ] && pass "its state is in $STAGECRAFT_STATE_ROOT/$node-cpu" ||
    fail "no state folder $STAGECRAFT_STATE_ROOT/$node-cpu: $(ls "$STAGECRAFT_STATE_ROOT")"

for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7))"; done \
    >"$work/text.txt"
# a slower build (sanitizers) trains fewer steps: what is checked is the resume after the cancel
steps=2000
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && steps=300
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "slurm",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2,
           "cpu_kernels": "reference"},
 "data": {"kind": "text", "path": "$work/text.txt"},
 "batch_size": 8, "microbatches": 4, "schedule": "1f1b", "strategy": "uniform",
 "workers": 1, "steps": $steps, "seed": 7, "checkpoint_every": 10,
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
wpid=$(cat "$STAGECRAFT_STATE_ROOT/$node-cpu/worker-$node-cpu.lock")
"$sc" submit "$work/job.json" >/dev/null || fail "submit"

# Cancel the workers' job once a checkpoint is known. The steps take milliseconds: the worker
# is frozen (its PID is in its lock file) as soon as the coordinator knows a checkpoint, so
# that the job cannot end before the cancel; Slurm's cancel continues it (SIGCONT) and stops it
# (SIGTERM).
freeze_when_known 120 job-1 10 "$wpid" ||
    fail "job-1 did not checkpoint step 10: $("$sc" status job-1 | sed -n 2,3p)"
is_state job-1 running || is_state job-1 recovering ||
    fail "job-1 is $(job_state job-1) before the workers' Slurm job was cancelled"
sl scancel "$wjob"
kill -CONT "$wpid" 2>/dev/null
if wait_for 60 is_slurm "$wjob" CANCELLED; then
    pass "scancel: Slurm job $wjob is CANCELLED"
else
    fail "Slurm job $wjob is $(slurm_state "$wjob") after scancel"
fi
wait_for 30 is_state job-1 recovering &&
    "$sc" status job-1 --json | grep -q "left: its process was stopped" &&
    pass "the cancelled worker told the coordinator it leaves: job-1 is recovering" ||
    fail "job-1 is $(job_state job-1): $(field job-1 reason)"

wjob2=$(submit stagecraft-workers.sbatch)
wait_for 300 is_state job-1 succeeded &&
    pass "the workers submitted again (Slurm job $wjob2): job-1 resumed and succeeded" ||
    fail "job-1 is $(job_state job-1): $(field job-1 reason); Slurm job $wjob2 is $(slurm_state "$wjob2")"
grep -q "from the checkpoint of step" "$work/coordinator/coordinator-$cjob.log" &&
    pass "job-1 resumed from a checkpoint: $(grep -o "from the checkpoint of step [0-9]*" "$work/coordinator/coordinator-$cjob.log" | head -n 1)" ||
    fail "job-1 did not resume from a checkpoint"
[ "$("$sc" workers --json | jq '.workers | length')" -eq 1 ] && [ "$(worker_epoch "$node-cpu")" -ge 2 ] &&
    pass "the worker came back as the same worker (one registered, epoch $(worker_epoch "$node-cpu"))" ||
    fail "workers: $("$sc" workers)"
sl scancel "$wjob2"
wait_for 60 is_slurm "$wjob2" CANCELLED || fail "Slurm job $wjob2 is $(slurm_state "$wjob2") after scancel"

# ---- a worker that cannot start fails the Slurm job with its exit status
bjob=$(STAGECRAFT_BIN=$work/no-such-stagecraft submit stagecraft-workers.sbatch)
if wait_for 60 is_slurm "$bjob" FAILED && [ "$(slurm_exit "$bjob")" = 127:0 ]; then
    pass "a worker that cannot start: Slurm job $bjob is FAILED, exit code 127"
else
    fail "Slurm job $bjob is $(slurm_state "$bjob") (exit $(slurm_exit "$bjob")): $(cat "$work/stagecraft-workers-$bjob.out")"
fi

sl scancel "$cjob"
wait_for 60 is_slurm "$cjob" CANCELLED || fail "the coordinator's Slurm job is $(slurm_state "$cjob")"
[ ! -e "$addr_file" ] && pass "the stopped coordinator's job removed its address file" ||
    fail "$addr_file is still there"

if [ "$failures" -ne 0 ]; then
    tail -n 20 "$work"/stagecraft-*.out "$work/coordinator/coordinator-$cjob.log" "$s/slurmd.log"
fi
finish
