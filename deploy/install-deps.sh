#!/usr/bin/env bash
# Installs the Debian 12 packages stagecraft builds against, and only those that are missing.
# Idempotent: a second run installs nothing. Runs apt-get as root, or through sudo.
# The CUDA toolkit and NCCL are not Debian packages: they are used when present under
# /usr/local/cuda (or CUDAToolkit_ROOT / NCCL_ROOT) and the build is CPU-only otherwise.
set -euo pipefail

if [ "${STAGECRAFT_SKIP_DEPS:-}" = 1 ]; then
    echo "install-deps: STAGECRAFT_SKIP_DEPS=1 (an offline bundle provides the libraries)"
    exit 0
fi

packages=(
    build-essential cmake pkg-config
    libgrpc-dev
    libprotobuf-c-dev protobuf-c-compiler
    libzmq3-dev
    libhwloc-dev
    libcmocka-dev
    libopenblas-openmp-dev
    libjansson-dev
    libsqlite3-dev
    libmicrohttpd-dev
    iproute2 jq
    # tests of the deploy files: shellcheck on every script, systemd-analyze verify on the
    # units, a virtual environment for the Kubernetes schema check
    shellcheck systemd python3-venv
    # the dashboard's tests: Playwright (from PyPI, in a virtual environment) drives Chromium;
    # promtool (in prometheus) checks /metrics
    chromium fonts-dejavu-core prometheus
    # load beside the chaos test's job (test_chaos.sh), and the SQLite shell that checks the
    # coordinator's database after its disk filled (test_coordinator_disk_full.sh)
    stress-ng sqlite3
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages already installed"
    exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
