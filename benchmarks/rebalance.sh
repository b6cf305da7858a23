#!/usr/bin/env bash
# Rebalance under load: ITEMS × VALUE_SIZE items in a 3-node cluster (replicaNumber 1), then a 4th node is
# added and rebalanced in while settee-bench (smart client, 90/10 get/set) keeps running. Reports the
# rebalance's duration and the throughput dip: per-second ops during the rebalance against the median of
# the seconds before it, from the same run.
#   ITEMS=1000000 VALUE_SIZE=1024 benchmarks/rebalance.sh      (needs release builds: make release, and
#   cd benchmarks && swift build -c release --product settee-bench)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd .. && pwd)
ITEMS=${ITEMS:-1000000}; VALUE_SIZE=${VALUE_SIZE:-1024}; QUOTA=${QUOTA:-2048}; BEFORE=${BEFORE:-15}
BENCH=".build/release/settee-bench"
SERVER="${SETTEE_SERVER_BIN:-$ROOT/.build/release/settee-server}"
[ -x "$BENCH" ] && [ -x "$SERVER" ] || { echo "rebalance: release builds missing" >&2; exit 1; }
OUT="results/$(date +%Y-%m-%d)"; mkdir -p "$OUT"
WORK=$(mktemp -d)
BASE=$(( 36000 + RANDOM % 3000 ))
export SETTEE_CLUSTER_DATA="$WORK/cluster" SETTEE_SERVER_BIN="$SERVER" SETTEE_BASE_ADMIN_PORT=$BASE \
    SETTEE_BASE_KV_PORT=$((BASE + 1000)) SETTEE_BASE_VIEWS_PORT=$((BASE + 1))
trap '(cd "$ROOT" && cluster/down >/dev/null 2>&1) || true; rm -rf "$WORK"' EXIT
A=(-u Administrator:password)
(cd "$ROOT" && cluster/up 3 >"$WORK/up.log")
curl -sf "${A[@]}" -X POST "http://127.0.0.1:$BASE/pools/default" -d memoryQuota=$((QUOTA * 2)) >/dev/null
curl -sf "${A[@]}" "http://127.0.0.1:$BASE/pools/default/buckets" -d name=bench -d ramQuotaMB="$QUOTA" \
    -d replicaNumber=1 -d authType=sasl >/dev/null
sleep 2
echo "loading $ITEMS × $VALUE_SIZE B through the smart client"
start=$(date +%s.%N)
"$BENCH" run --target "settee=127.0.0.1:$BASE" --bucket bench --mix set=100 --value-size "$VALUE_SIZE" \
    --keys "$ITEMS" --ops "$ITEMS" --connections 16 --depth 8 --no-preload --quiet --json "$WORK/load.json" >/dev/null
echo "loaded in $(echo "$(date +%s.%N) - $start" | bc) s"
# Steady load for the whole experiment; its JSON carries the per-second timeline.
"$BENCH" run --target "settee=127.0.0.1:$BASE" --bucket bench --mix get=90,set=10 --value-size "$VALUE_SIZE" \
    --keys "$ITEMS" --connections 16 --depth 4 --duration 600s --warmup 0s --no-preload --quiet \
    --json "$WORK/steady.json" >/dev/null 2>"$WORK/steady.err" &
LOAD=$!
sleep "$BEFORE"
t0=$(date +%s.%N)
(cd "$ROOT" && cluster/add 1 >"$WORK/add.log")
t1=$(date +%s.%N)
sleep 10
kill -INT "$LOAD" 2>/dev/null || true
wait "$LOAD" 2>/dev/null || true
python3 - "$WORK/steady.json" "$BEFORE" "$t0" "$t1" "$ITEMS" "$VALUE_SIZE" <<'PY' | tee "$OUT/rebalance-3-to-4.txt"
import json, statistics, sys
path, before, t0, t1, items, vsize = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
runs = json.load(open(path))
tl = runs[0].get("timeline") or []
dur = t1 - t0
pre = tl[2:before] or tl[:before]
during = tl[before:before + int(dur) + 1]
base = statistics.median(pre) if pre else 0
print(f"rebalance 3 -> 4 nodes of {items} x {vsize} B items (replicaNumber 1): {dur:.1f} s (add + rebalance, cluster/add)")
print(f"steady load (smart client, 16 conns x depth 4, 90/10): median {base:.0f} ops/s before")
if during and base:
    print(f"during: median {statistics.median(during):.0f} ops/s ({statistics.median(during)/base:.2f} x), "
          f"min {min(during)} ops/s ({min(during)/base:.2f} x) over {len(during)} s")
print(f"errors during the run: {runs[0].get('errors', {})}")
PY
