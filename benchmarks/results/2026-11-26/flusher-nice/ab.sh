#!/usr/bin/env bash
# The flusher thread at nice 0 against nice 10 (renice of a running node's settee-flusher thread, alternated), the
# pipelined 90/10 row (16 connections x depth 16) against memcached -t 2, PAIRS pairs of `settee-bench compare`
# with 3 rounds each. Usage: ab.sh NODE_PID NODE_KV_PORT MEMCACHED_PORT [PAIRS]
set -euo pipefail
PID=$1; KV=$2; MC=$3; PAIRS=${4:-6}
BENCH=${BENCH:-$(cd "$(dirname "$0")/../../.." && pwd)/.build/release/settee-bench}
FL=$(grep -l flusher /proc/$PID/task/*/comm | cut -d/ -f5)
for i in $(seq 1 "$PAIRS"); do
    for n in 0 10; do
        renice -n $n -p "$FL" >/dev/null
        line=$("$BENCH" compare --target memcached@memcached-binary=127.0.0.1:$MC --target node@memcached-binary=127.0.0.1:$KV \
            --mix get=90,set=10 --value-size 1024 --keys 100000 --connections 16 --depth 16 --duration 5s --rounds 3 \
            --quiet --no-preload 2>&1 | grep "^node " | tail -1)
        echo "pair $i flusher nice $n: $line"
    done
done
renice -n 0 -p "$FL" >/dev/null
