#!/usr/bin/env bash
# Memory per resident item and warmup speed of one node:
#   1. load ITEMS x VALUE_SIZE JSON docs (pipelined), wait until all are persisted;
#   2. RSS growth / ITEMS = bytes of RAM per resident item;
#   3. kill -9, restart on the same data dir, time until the KV port accepts (warmup is done
#      before the node listens) and read the engine's own warmup figures from STAT.
#   ITEMS=1000000 VALUE_SIZE=1024 benchmarks/warmup-and-memory.sh
# env: OUT (directory of the .txt), JSON (also write the figures there, for the suite's report), NAME (their name).
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
ITEMS=${ITEMS:-1000000}; VALUE_SIZE=${VALUE_SIZE:-1024}
OUT="${OUT:-results/$(date +%Y-%m-%d)}"; mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'kill -9 $SETTEE_PID 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT

start_settee "$WORK/node"
init_settee 8192
rss0=$(rss_kb "$SETTEE_PID")
load=$(python3 kvload.py --port "$KV_PORT" --items "$ITEMS" --value-size "$VALUE_SIZE" --wait-persisted)
sleep 1
rss1=$(rss_kb "$SETTEE_PID")
disk=$(du -sk "$WORK/node" | cut -f1)
kill -9 "$SETTEE_PID"; wait "$SETTEE_PID" 2>/dev/null || true
t0=$(date +%s.%N)
start_settee "$WORK/node"
t1=$(date +%s.%N)
stats=$(python3 -c "
import socket,sys; sys.path.insert(0,'.'); import kvload
s=socket.create_connection(('127.0.0.1',$KV_PORT)); st=kvload.stats(s)
print(st['curr_items'], st['ep_warmup_value_count'], st['ep_warmup_time'])")
read -r items warm_items warm_us <<<"$stats"
rss2=$(rss_kb "$SETTEE_PID")
summary="$ITEMS x $VALUE_SIZE B JSON docs; $load
RAM per resident item: $(( (rss1 - rss0) * 1024 / ITEMS )) B (RSS $rss0 kB -> $rss1 kB); after warmup RSS $rss2 kB
disk: $disk kB for the bucket ($(( disk * 1024 / ITEMS )) B per item, LZ4 + SQLite)
restart after kill -9: process start to KV port open $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b-a}') s
engine warmup: $warm_items items in $(awk -v u="$warm_us" 'BEGIN {printf "%.2f", u/1e6}') s = $(awk -v n="$warm_items" -v u="$warm_us" 'BEGIN {printf "%.0f", n/(u/1e6)}') docs/s; curr_items after restart: $items"
echo "$summary" | tee "$OUT/warmup-and-memory.txt"
if [ -n "${JSON:-}" ]; then
    python3 - "$JSON" "${NAME:-warmup}" "$ITEMS" "$VALUE_SIZE" "$load" "$rss0" "$rss1" "$rss2" "$disk" "$t0" "$t1" \
        "$warm_items" "$warm_us" "$items" <<'PY'
import json, sys
a = sys.argv
load = dict(kv.split("=") for kv in a[5].split())
items = int(a[3])
out = {
    "name": a[2], "items": items, "valueSize": int(a[4]),
    "loadSeconds": float(load["load_s"]), "loadOpsPerSecond": float(load["load_ops_per_s"]),
    "persistedSeconds": float(load.get("persisted_s", "0")), "loadErrors": int(load["errors"]),
    "ramBytesPerItem": (int(a[7]) - int(a[6])) * 1024 / items, "rssAfterWarmupKB": int(a[8]),
    "diskBytesPerItem": int(a[9]) * 1024 / items,
    "restartSeconds": float(a[11]) - float(a[10]),
    "warmupItems": int(a[12]), "warmupSeconds": int(a[13]) / 1e6,
    "warmupDocsPerSecond": int(a[12]) / (int(a[13]) / 1e6) if int(a[13]) else 0,
    "itemsAfterRestart": int(a[14]),
}
json.dump(out, open(a[1], "w"), indent=2)
PY
fi
