#!/usr/bin/env bash
# Every shell script of the project parses (`bash -n`, or `sh -n` for /bin/sh ones) and
# passes ShellCheck at severity warning (settings in .shellcheckrc at the top). Scripts are the files
# named *.sh or *.sbatch and those whose first line is a sh or bash #! line; build folders
# (build*) and .git are left out. Skipped (77) after the parse checks where shellcheck is
# missing (deploy/install-deps.sh installs it).
# Usage: test_shell_scripts.sh PATH/TO/stagecraft   (the binary is not used)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
failures=0

scripts=()
while IFS= read -r -d '' f; do
    case $f in
    *.sh | *.sbatch) scripts+=("$f") ;;
    *) head -n 1 "$f" 2>/dev/null | grep -qE '^#!.*[/ ](ba)?sh( |$)' && scripts+=("$f") ;;
    esac
done < <(cd "$root" && find . \( -name .git -o -name 'build*' -type d \) -prune -o -type f \
    \( -name '*.sh' -o -name '*.sbatch' -o -perm -u+x -o -path './deploy/*' \) -print0 | sort -z)

[ ${#scripts[@]} -ge 10 ] || { echo "FAIL: found only ${#scripts[@]} scripts under $root"; exit 1; }
for f in deploy/slurm/stagecraft-workers.sbatch deploy/slurm/stagecraft-coordinator.sbatch \
    deploy/install-deps.sh tests/integration/lib.sh; do
    printf '%s\n' "${scripts[@]}" | grep -qx "./$f" || { echo "FAIL: $f not among the scripts"; failures=$((failures + 1)); }
done

cd "$root" || exit 1
for f in "${scripts[@]}"; do
    shell=bash
    head -n 1 "$f" | grep -qE '^#!(/usr)?/bin/sh( |$)' && shell="sh"
    if out=$($shell -n "$f" 2>&1); then
        echo "ok: $shell -n $f"
    else
        echo "FAIL: $shell -n $f: $out"
        failures=$((failures + 1))
    fi
done
if [ "$failures" -ne 0 ]; then
    echo "$(basename "$0"): $failures failure(s)"
    exit 1
fi

if ! command -v shellcheck >/dev/null 2>&1; then
    echo "skip: shellcheck is not installed (deploy/install-deps.sh installs it); ${#scripts[@]} scripts parse"
    exit 77
fi
if out=$(shellcheck -S warning "${scripts[@]}" 2>&1); then
    echo "ok: shellcheck -S warning on ${#scripts[@]} scripts"
else
    echo "$out"
    echo "FAIL: shellcheck found problems (above)"
    exit 1
fi
echo "$(basename "$0"): all checks passed"
