#!/usr/bin/env bash
# How `stagecraft advise`'s search grows with the catalogue: synthetic catalogues of T device
# types and N devices on servers of 4 over Z zones (one type per server, types and zones dealt
# round-robin), a 26-block GPT-like profile, the default objective and strategy (hetero).
# Prints one line per size: types, devices, zones, classes, candidate sets, plans made,
# exact or greedy, seconds.
# usage: bench/bench_advise.sh [BUILD_DIR]   (sizes "T:N:Z" in $SIZES)
set -euo pipefail
build=${1:-build}
bin="$build/cli/stagecraft"
sizes=${SIZES:-"2:8:1 3:8:2 3:16:2 4:32:2 6:32:4 6:48:4 6:64:4"}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir/gpt.json" <<'PY'
import json, sys
blocks = [{"name": "embed", "forward_s": 0.002, "backward_s": 0.004, "activation_bytes": 8.4e6,
           "parameter_bytes": 2.0e8, "stash_bytes": 8.4e6}]
for i in range(24):
    blocks.append({"name": f"h{i}", "forward_s": 0.006, "backward_s": 0.012,
                   "activation_bytes": 8.4e6, "parameter_bytes": 2.9e8, "stash_bytes": 1.2e8})
blocks.append({"name": "head", "forward_s": 0.004, "backward_s": 0.008, "activation_bytes": 16,
               "parameter_bytes": 2.0e8, "stash_bytes": 8e7})
json.dump({"format": "stagecraft-profile", "version": 1, "model": "gpt-1.3b-like",
           "reference_device": "A100-80GB", "microbatch_size": 4, "blocks": blocks},
          open(sys.argv[1], "w"))
PY
printf '%5s %7s %5s %7s %12s %7s %6s %8s\n' types devices zones classes candidates planned mode seconds
for s in $sizes; do
    IFS=: read -r t n z <<<"$s"
    python3 - "$dir/cat.json" "$t" "$n" "$z" <<'PY'
import json, sys
path, t, n, z = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
kinds = [("H100", 2.2, 80e9, 6.9), ("A100-80GB", 1.0, 80e9, 4.1), ("A100-40GB", 0.95, 40e9, 3.4),
         ("L40S", 0.75, 48e9, 1.9), ("A10G", 0.35, 24e9, 1.0), ("L4", 0.25, 24e9, 0.8)][:t]
types = {k: {"relative_speed": s, "memory_bytes": m, "price_per_hour": p} for k, s, m, p in kinds}
servers = []
for i in range(n // 4):
    k = kinds[i % t][0]
    servers.append({"name": f"s{i}", "zone": f"z{i % z}", "devices": [k] * 4,
                    "intra_bandwidth_bytes_per_s": 64e9, "nic_bandwidth_bytes_per_s": 12.5e9})
json.dump({"format": "stagecraft-cluster", "version": 1, "device_types": types,
           "servers": servers, "zones": {"bandwidth_bytes_per_s": 3e9, "price_per_gb": 0.01}},
          open(path, "w"))
PY
    start=$(date +%s.%N)
    "$bin" advise --model "$dir/gpt.json" --catalog "$dir/cat.json" --batch 128 --json >"$dir/out.json"
    end=$(date +%s.%N)
    python3 - "$dir/out.json" "$t" "$n" "$z" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["search"]
print("%5s %7s %5s %7d %12.4g %7d %6s %8.2f" % (sys.argv[2], sys.argv[3], sys.argv[4],
      r["classes"], r["candidates"], r["planned"], "exact" if r["exact"] else "greedy",
      float(sys.argv[6]) - float(sys.argv[5])))
PY
done
