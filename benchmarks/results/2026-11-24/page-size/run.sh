#!/usr/bin/env bash
# ADR 0072: 16 KiB (OLD) against 4 KiB (NEW) pages for new data files, alternated.
#   run.sh OLD_SERVER NEW_SERVER BENCH PAIRS   (writes *.txt beside itself, suffixed by env TAG; SKIP_WARMUP=1 skips part 1)
# 1. warmup-and-memory.sh (the suite's warmup-1m: 1,000,000 x 1 KiB pipelined quiet SETs, persisted, kill -9,
#    restart), OLD then NEW, PAIRS times: bulk load + persistence, and warmup after kill -9.
# 2. one fresh cluster/up 1 per binary and a fresh redis appendfsync always; settee-bench compare alternates the
#    targets round by round (2*PAIRS rounds): durable sets (the suite's durable-vs-redis-always row, after a
#    100,000-key preload), 90/10 depth 1 through the smart client (cache-90-10's cluster1), 90/10 depth 16 on the KV
#    port (pipelined-90-10's shape, on the cluster's node).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../../../.." && pwd)
OLD=$1; NEW=$2; BENCH=$3; PAIRS=${4:-3}
WORK=$(mktemp -d); PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for d in old new; do SETTEE_CLUSTER_DATA="$WORK/$d" "$ROOT/cluster/down" >/dev/null 2>&1 || true; done
    wait 2>/dev/null || true; rm -rf "$WORK"
}
trap cleanup EXIT
source "$ROOT/benchmarks/lib.sh"
if [ "${SKIP_WARMUP:-0}" != 1 ]; then
  for i in $(seq 1 "$PAIRS"); do
    for which in old new; do
        bin=$OLD; [ "$which" = new ] && bin=$NEW
        echo "== warmup-1m pair $i $which ($(uptime | sed 's/.*load/load/'))"
        (cd "$ROOT/benchmarks" && SETTEE_SERVER_BIN=$bin ITEMS=${ITEMS:-1000000} VALUE_SIZE=1024 OUT="$WORK" \
            ./warmup-and-memory.sh)
    done
  done 2>&1 | tee "$HERE/warmup-1m.txt"
fi
RA=$(free_port); mkdir -p "$WORK/ra"
redis-server --port "$RA" --bind 127.0.0.1 --dir "$WORK/ra" --appendonly yes --appendfsync always --save "" \
    --daemonize no --logfile "$WORK/ra.log" & PIDS+=($!)
cluster() { # name bin base
    (cd "$ROOT" && SETTEE_CLUSTER_DATA="$WORK/$1" SETTEE_SERVER_BIN="$2" SETTEE_BASE_ADMIN_PORT=$3 \
        SETTEE_BASE_KV_PORT=$(($3 + 1000)) SETTEE_BASE_VIEWS_PORT=$(($3 + 2000)) cluster/up 1 >"$WORK/$1.up.log" 2>&1)
}
cluster old "$OLD" 27091; cluster new "$NEW" 27191; wait_port "$RA"
common=(--value-size 1024 --keys 100000 --duration 5s --rounds $((2 * PAIRS)) --quiet)
echo "== durable sets, 32 x depth 1 ($(uptime | sed 's/.*load/load/'))"
"$BENCH" compare --target "old16k@settee=127.0.0.1:27091,durability=persistToMajority" \
    --target "new4k@settee=127.0.0.1:27191,durability=persistToMajority" --target "redis-always@redis=127.0.0.1:$RA" \
    --mix set=100 --connections 32 --depth 1 "${common[@]}" | tee "$HERE/durable${TAG:-}.txt"
echo "== 90/10 smart client, 32 x depth 1 ($(uptime | sed 's/.*load/load/'))"
"$BENCH" compare --target "old16k@settee=127.0.0.1:27091" --target "new4k@settee=127.0.0.1:27191" \
    --mix get=90,set=10 --connections 32 --depth 1 --no-preload "${common[@]}" | tee "$HERE/cache-90-10${TAG:-}.txt"
echo "== 90/10 KV port, 16 x depth 16 ($(uptime | sed 's/.*load/load/'))"
"$BENCH" compare --target "old16k@memcached-binary=127.0.0.1:28091" --target "new4k@memcached-binary=127.0.0.1:28191" \
    --mix get=90,set=10 --connections 16 --depth 16 --no-preload "${common[@]}" | tee "$HERE/pipelined-90-10${TAG:-}.txt"
echo "== load at end: $(uptime | sed 's/.*load/load/')"
