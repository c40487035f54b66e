#!/usr/bin/env bash
# The dashboard in a real browser: Playwright for Python drives Debian's Chromium (installed by
# deploy/install-deps.sh) against a coordinator with two named workers and a running job; the
# page loads with no console error, lists the workers, draws the job's loss curve, plan and
# measured timeline, and updates as the job advances (dashboard_browser.py). A screenshot of
# the job's page is kept beside the test's output (dashboard.png in ctest's working folder).
# Playwright lives in a virtual environment cached under ~/.cache/stagecraft-tests (made on the
# first run from PyPI); skipped (77) without Chromium, python3 -m venv or PyPI.
# Usage: test_dashboard_browser.sh PATH/TO/stagecraft
sc=${1:?usage: test_dashboard_browser.sh PATH/TO/stagecraft}
here=$(cd "$(dirname "$0")" && pwd)
shot=$(pwd)/dashboard.png
. "$here/lib.sh"
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || { echo "SKIP: needs Chromium (Debian package chromium)"; exit 77; }
venv=${XDG_CACHE_HOME:-$HOME/.cache}/stagecraft-tests/playwright-1.65
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import playwright" 2>/dev/null; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! timeout 120 python3 -m venv "$venv" >"$work/venv.log" 2>&1; then
        echo "SKIP: cannot make a Python virtual environment (Debian: python3-venv): $(tail -n 2 "$work/venv.log")"
        exit 77
    fi
    # the package's own browser download is not needed: Debian's Chromium is driven
    if ! timeout 300 "$venv/bin/pip" install -q --disable-pip-version-check "playwright==1.65.*" \
        >>"$work/venv.log" 2>&1; then
        echo "SKIP: cannot install Playwright from PyPI: $(tail -n 2 "$work/venv.log")"
        rm -rf "$venv"
        exit 77
    fi
fi

start_coordinator coord "$work/state" --http 127.0.0.1:0
port=$(sed -n 's/^dashboard and metrics on http port \([0-9]*\).*/\1/p' "$work/coord.log")
[ -n "$port" ] || { fail "no http port in the coordinator's log"; finish; exit 1; }
start_worker alpha-node --threads 1
start_worker beta-node --threads 1
wait_alive 30 2 || fail "the workers did not register"
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "browser",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 1000000, "seed": 3, "rebalance": "off"}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 running || fail "job-1 is $(job_state job-1): $(field job-1 reason)"
has_steps() { [ "$(field job-1 step)" -ge 5 ] 2>/dev/null; }
wait_for 60 has_steps || fail "job-1 trains no step"
timeout 240 "$venv/bin/python" "$here/dashboard_browser.py" "http://127.0.0.1:$port/" job-1 \
    alpha-node beta-node --shot "$shot" --chromium "$chromium" 2>&1 | tee "$work/browser.log"
[ "${PIPESTATUS[0]}" = 0 ] && pass "the dashboard in Chromium: $(tail -n 1 "$work/browser.log")" ||
    fail "the dashboard in Chromium (see above)"
[ -s "$shot" ] && pass "screenshot kept: $shot" || fail "no screenshot at $shot"
"$sc" cancel job-1 --reason "test over" >/dev/null 2>&1
finish
