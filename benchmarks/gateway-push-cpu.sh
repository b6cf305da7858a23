#!/usr/bin/env bash
# Gateway push CPU per document (issue 19, docs/adr/0064): one settee node with bucket `gateway`, a settee-gateway
# on walrus: and one on the node's bucket; each round pushes DOCS documents (settee-bench gateway --phase push) to
# one target at a time, alternating, and reads the user+system CPU ticks of the gateway (and the node) from
# /proc/PID/stat before and after. Prints docs/s, CPU microseconds per pushed document per process, and each
# process's RSS after the round (a gateway on the cluster holds no documents: its RSS should level off).
# PROFILE=perf|strace also profiles each push (files in OUT).
# Env: SETTEE_SERVER_BIN, SETTEE_GATEWAY_BIN, SETTEE_BENCH_BIN, DOCS (10000), ROUNDS (3), OUT (scratch directory).
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
BENCH="${SETTEE_BENCH_BIN:-$(pwd)/.build/release/settee-bench}"
DOCS=${DOCS:-10000}; ROUNDS=${ROUNDS:-3}
WORK=${OUT:-$(mktemp -d)}; mkdir -p "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
start_settee "$WORK/node"; PIDS+=("$SETTEE_PID"); NODE=$SETTEE_PID
curl -sf -X POST "http://127.0.0.1:$ADMIN_PORT/settings/web" -d username=Administrator -d password=password -d port=SAME >/dev/null
curl -sf -u Administrator:password -d name=gateway -d ramQuotaMB=1024 -d authType=none -d replicaNumber=0 \
    "http://127.0.0.1:$ADMIN_PORT/pools/default/buckets" >/dev/null
sleep 1
start_gateway "$WORK/gw-walrus" "walrus:"; PIDS+=("$GW_PID"); GWW=$GW_PID; GWW_PORT=$GW_PORT; GWW_ADMIN=$GW_ADMIN_PORT
start_gateway "$WORK/gw-cluster1" "http://127.0.0.1:$ADMIN_PORT" gateway Administrator password
PIDS+=("$GW_PID"); GWC=$GW_PID; GWC_PORT=$GW_PORT; GWC_ADMIN=$GW_ADMIN_PORT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
    for t in walrus cluster1; do
        if [ $t = walrus ]; then gw=$GWW; port=$GWW_PORT; admin=$GWW_ADMIN; else gw=$GWC; port=$GWC_PORT; admin=$GWC_ADMIN; fi
        g0=$(ticks "$gw"); n0=$(ticks "$NODE"); TRACERS=()
        # PROFILE=perf: perf record -g of the gateway; PROFILE=strace: syscall counts of the gateway and the node.
        if [ "${PROFILE:-}" = perf ]; then
            perf record -g -F ${PERF_FREQ:-999} -p "$gw" -o "$WORK/perf-$t-$r.data" >/dev/null 2>&1 & TRACERS+=($!)
        elif [ "${PROFILE:-}" = strace ]; then
            strace -f -c -p "$gw" -o "$WORK/strace-gw-$t-$r.txt" 2>/dev/null & TRACERS+=($!)
            strace -f -c -p "$NODE" -o "$WORK/strace-node-$t-$r.txt" 2>/dev/null & TRACERS+=($!)
        fi
        [ ${#TRACERS[@]} -eq 0 ] || sleep 1
        line=$("$BENCH" gateway --url "gw-$t@http://127.0.0.1:$port/db" --admin-url "http://127.0.0.1:$admin/db" \
            --phase push --docs "$DOCS" --doc-size 1024 --batch 200 --connections 4 --rounds 1 --quiet 2>&1 |
            grep -i "push" | head -1)
        g1=$(ticks "$gw"); n1=$(ticks "$NODE")
        for p in "${TRACERS[@]}"; do kill -INT "$p"; wait "$p" 2>/dev/null || true; done
        echo "round $r gw-$t: $line | gateway $(( (g1 - g0) * 1000000 / HZ / DOCS )) us/doc, node $(( (n1 - n0) * 1000000 / HZ / DOCS )) us/doc | RSS gateway $(rss_kb "$gw") kB, node $(rss_kb "$NODE") kB | load $(cut -d' ' -f1 /proc/loadavg)"
    done
done
