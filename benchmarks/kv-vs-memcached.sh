#!/usr/bin/env bash
# Throughput of one settee node against memcached under the same memcaslap load (binary protocol,
# 90% get / 10% set, 1 KiB values), alternating targets round by round so both see the same noise.
#   ROUNDS=3 DURATION=20s CONCURRENCY=64 benchmarks/kv-vs-memcached.sh
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
ROUNDS=${ROUNDS:-3}; DURATION=${DURATION:-20s}; CONCURRENCY=${CONCURRENCY:-64}
OUT="results/$(date +%Y-%m-%d)"; mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'kill $SETTEE_PID $MC_PID 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT

MC_PORT=$(free_port)
memcached -u "$(id -un)" -l 127.0.0.1 -p "$MC_PORT" -U 0 -t 2 -m 4096 &
MC_PID=$!
start_settee "$WORK/node"
init_settee 4096
wait_port "$MC_PORT"

run() { memcaslap -s "127.0.0.1:$1" -T 2 -c "$CONCURRENCY" -B -t "$DURATION" -X 1024 2>&1 | awk '/^Run time/ {for(i=1;i<=NF;i++) if ($i=="TPS:") print $(i+1)}'; }
: >"$WORK/mc"; : >"$WORK/st"; : >"$WORK/ratio"
echo "round memcached_tps settee_tps ratio"
for r in $(seq 1 "$ROUNDS"); do
    mc=$(run "$MC_PORT"); st=$(run "$KV_PORT")
    ratio=$(awk -v a="$st" -v b="$mc" 'BEGIN {printf "%.3f", a/b}')
    echo "$mc" >>"$WORK/mc"; echo "$st" >>"$WORK/st"; echo "$ratio" >>"$WORK/ratio"
    echo "$r $mc $st $ratio"
done
summary="memcaslap -T 2 -c $CONCURRENCY -B -t $DURATION -X 1024, $ROUNDS alternated rounds
memcached 1.6 (-t 2) median TPS: $(median <"$WORK/mc")
settee (release, $(nproc) KV threads) median TPS: $(median <"$WORK/st")
ratio settee/memcached: median $(median <"$WORK/ratio"), min $(sort -n "$WORK/ratio" | head -1), max $(sort -n "$WORK/ratio" | tail -1)"
echo "$summary" | tee "$OUT/kv-vs-memcached.txt"
