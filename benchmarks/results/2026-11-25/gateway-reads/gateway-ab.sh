#!/usr/bin/env bash
# A/B two gateway binaries A and B (env) on one node, each on a bucket of its own; alternate pushes of DOCS (20000)
# for ROUNDS (4); CPU per document from /proc. Server binary: /tmp/base/settee-server (edit). Stop 42's push check.
set -euo pipefail
cd /work/main/benchmarks
source ./lib.sh
BENCH=$(pwd)/.build/release/settee-bench
WORK=/tmp/exp/gwab; rm -rf "$WORK"; mkdir -p "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
SETTEE_SERVER_BIN=/tmp/base/settee-server; BIN=/tmp/base/settee-server
start_settee "$WORK/node"; PIDS+=("$SETTEE_PID"); NODE=$SETTEE_PID
curl -sf -X POST "http://127.0.0.1:$ADMIN_PORT/settings/web" -d username=Administrator -d password=password -d port=SAME >/dev/null
for b in ga gb; do curl -sf -u Administrator:password -d name=$b -d ramQuotaMB=512 -d authType=none -d replicaNumber=0 \
    "http://127.0.0.1:$ADMIN_PORT/pools/default/buckets" >/dev/null; done
sleep 1
GW_BIN=$A; start_gateway "$WORK/gwa" "http://127.0.0.1:$ADMIN_PORT" ga Administrator password; PIDS+=("$GW_PID"); PA=$GW_PID; PORTA=$GW_PORT; ADMA=$GW_ADMIN_PORT
GW_BIN=$B; start_gateway "$WORK/gwb" "http://127.0.0.1:$ADMIN_PORT" gb Administrator password; PIDS+=("$GW_PID"); PB=$GW_PID; PORTB=$GW_PORT; ADMB=$GW_ADMIN_PORT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK); DOCS=${DOCS:-20000}
for r in $(seq 1 ${ROUNDS:-4}); do
  for t in a b; do
    if [ $t = a ]; then p=$PA; port=$PORTA; adm=$ADMA; else p=$PB; port=$PORTB; adm=$ADMB; fi
    g0=$(ticks $p); n0=$(ticks $NODE)
    line=$("$BENCH" gateway --url "gw$t@http://127.0.0.1:$port/db" --admin-url "http://127.0.0.1:$adm/db" --phase push --docs $DOCS --doc-size 1024 --batch 200 --connections 4 --rounds 1 --quiet 2>&1 | grep -i "push:" | head -1 | sed -E 's/.*= ([0-9]+) docs.s.*/\1/')
    g1=$(ticks $p); n1=$(ticks $NODE)
    echo "round $r $t: $line docs/s gateway $(( (g1-g0)*1000000/HZ/DOCS )) us/doc node $(( (n1-n0)*1000000/HZ/DOCS )) us/doc"
  done
done
