#!/usr/bin/env bash
# deploy/kubernetes/stagecraft.yaml is valid against the Kubernetes schemas, strictly (an
# unknown field is an error), for the newest version kubernetes-validate knows and an older
# one still in use; it holds the coordinator StatefulSet with a volume for its state, the worker
# DaemonSet and reads the tokens from a Secret. kubernetes-validate is installed from PyPI into
# a virtual environment the test makes; skipped (77) where python3 -m venv or PyPI is missing.
# Usage: test_kubernetes_manifest.sh PATH/TO/stagecraft   (the binary is not used)
sc=${1:?usage: test_kubernetes_manifest.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
manifest=$(cd "$(dirname "$0")/../../deploy/kubernetes" && pwd)/stagecraft.yaml

if ! timeout 120 python3 -m venv "$work/venv" >"$work/venv.log" 2>&1; then
    echo "skip: cannot make a Python virtual environment (Debian: apt-get install python3-venv): $(tail -n 2 "$work/venv.log")"
    exit 77
fi
if ! timeout 300 "$work/venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate \
    >"$work/pip.log" 2>&1; then
    echo "skip: cannot install kubernetes-validate from PyPI: $(tail -n 2 "$work/pip.log")"
    exit 77
fi
kv=$work/venv/bin/kubernetes-validate

for version in "" 1.27; do
    out=$(timeout 120 "$kv" --strict ${version:+-k "$version"} "$manifest" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && ! echo "$out" | grep -qv '^INFO .* passed for resource'; then
        pass "valid (strict) against Kubernetes ${version:-$("$kv" --version)}: $(echo "$out" | sed -n 's/.* resource \([^ ]*\) .*/\1/p' | tr '\n' ' ')"
    else
        fail "kubernetes-validate --strict ${version:+-k $version}: exit $rc: $out"
    fi
done

# the validator does catch a misspelled field
sed 's/hostNetwork: true/hostNetwrk: true/' "$manifest" >"$work/bad.yaml"
timeout 120 "$kv" --strict --quiet "$work/bad.yaml" >"$work/bad.log" 2>&1 &&
    fail "a misspelled field passed: $(cat "$work/bad.log")" ||
    { grep -q hostNetwrk "$work/bad.log" && pass "a misspelled field is an error: $(cat "$work/bad.log")"; } ||
    fail "a misspelled field: $(cat "$work/bad.log")"

# The worker pod's script, taken out of the manifest: it parses, passes ShellCheck, and with
# two GPUs visible starts two workers, each with its own state folder on the node; the first
# to fail ends the pod with its exit status (fake nvidia-smi and stagecraft on PATH).
"$work/venv/bin/python" - "$manifest" >"$work/pod.sh" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "DaemonSet":
        print(d["spec"]["template"]["spec"]["containers"][0]["args"][0])
PY
bash -n "$work/pod.sh" && pass "the worker pod's script parses" || fail "the worker pod's script does not parse"
if command -v shellcheck >/dev/null 2>&1; then
    out=$(shellcheck -s bash -S warning "$work/pod.sh" 2>&1) && pass "the worker pod's script passes ShellCheck" ||
        fail "ShellCheck on the worker pod's script: $out"
fi
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "GPU 0: fake (UUID: GPU-0)"\necho "GPU 1: fake (UUID: GPU-1)"\n' >"$work/bin/nvidia-smi"
cat >"$work/bin/stagecraft" <<'FAKE'
#!/bin/bash
echo "$*" >>"$FAKE_LOG"
[ "$3" = cuda:1 ] && { sleep 1; exit 3; }
trap 'exit 0' TERM
while :; do sleep 0.1; done
FAKE
chmod +x "$work/bin/nvidia-smi" "$work/bin/stagecraft"
FAKE_LOG=$work/fake.log NODE_NAME=node-a HOST_IP=10.0.0.9 PATH=$work/bin:$PATH timeout 30 bash "$work/pod.sh"
rc=$?
[ $rc -eq 3 ] && pass "a failed worker ends the pod with its exit status (3)" || fail "the pod's script exited $rc"
[ "$(sort "$work/fake.log")" = "worker --device cuda:0 --name node-a-cuda0 --state /var/lib/stagecraft-worker/node-a-cuda0 --listen 0.0.0.0:0 --advertise 10.0.0.9
worker --device cuda:1 --name node-a-cuda1 --state /var/lib/stagecraft-worker/node-a-cuda1 --listen 0.0.0.0:0 --advertise 10.0.0.9" ] &&
    pass "two GPUs: two workers, each with a state folder of its node and GPU, advertising the node's address" ||
    fail "the pod started: $(cat "$work/fake.log")"

# what the deployment needs is there
y() { tr -d '\n' <"$manifest"; }
grep -q '^kind: StatefulSet' "$manifest" && y | grep -q 'volumeClaimTemplates:.*name: state' &&
    grep -q 'mountPath: /var/lib/stagecraft}' "$manifest" &&
    pass "the coordinator is a StatefulSet with its state on a claimed volume" ||
    fail "no coordinator StatefulSet with a state volume"
grep -q '^kind: DaemonSet' "$manifest" && grep -q 'nvidia.com/gpu.present' "$manifest" &&
    pass "the workers are a DaemonSet on GPU nodes" || fail "no worker DaemonSet on GPU nodes"
[ "$(grep -c 'secretKeyRef: {name: stagecraft-tokens, key: join}' "$manifest")" -eq 2 ] &&
    grep -q 'secretKeyRef: {name: stagecraft-tokens, key: client}' "$manifest" &&
    pass "the coordinator and the workers read the tokens from the Secret" ||
    fail "the tokens do not come from the stagecraft-tokens Secret"

finish
