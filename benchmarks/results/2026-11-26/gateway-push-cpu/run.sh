#!/usr/bin/env bash
# Where a gateway push on a cluster bucket spends CPU against one on walrus: one node with bucket `gateway`, a
# settee-gateway on walrus: and one on the node's bucket (benchmarks/lib.sh), then ROUNDS alternated rounds of
# `settee-bench gateway --phase push` (10,000 x 1 KiB, batches of 200, 4 in flight) against each alone, with the
# CPU ticks (utime + stime, 1/100 s) each process used during the round. Release binaries from benchmarks/.build.
# Usage: run.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../../.." && pwd)
export SETTEE_SERVER_BIN=${SETTEE_SERVER_BIN:-$bench/.build/release/settee-server}
export SETTEE_GATEWAY_BIN=${SETTEE_GATEWAY_BIN:-$bench/.build/release/settee-gateway}
cd "$bench"
source lib.sh
work=$(mktemp -d)
start_settee "$work/node"; NODE=$SETTEE_PID
trap 'kill $NODE ${GWW:-} ${GWC:-} 2>/dev/null; rm -rf "$work"' EXIT
curl -sf -X POST "http://127.0.0.1:$ADMIN_PORT/settings/web" -d username=Administrator -d password=password -d port=SAME >/dev/null
curl -sf -u Administrator:password -d name=gateway -d ramQuotaMB=512 -d authType=none -d replicaNumber=0 \
  "http://127.0.0.1:$ADMIN_PORT/pools/default/buckets" >/dev/null
sleep 1
start_gateway "$work/gww" "walrus:"; GWW=$GW_PID; WP=$GW_PORT; WA=$GW_ADMIN_PORT
start_gateway "$work/gwc" "http://127.0.0.1:$ADMIN_PORT" gateway Administrator password; GWC=$GW_PID; CP=$GW_PORT; CA=$GW_ADMIN_PORT
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
for r in $(seq 1 "${1:-3}"); do
  for t in walrus cluster; do
    if [ $t = walrus ]; then U=$WP; A=$WA; else U=$CP; A=$CA; fi
    n0=$(ticks $NODE); w0=$(ticks $GWW); c0=$(ticks $GWC)
    rate=$(.build/release/settee-bench gateway --url $t@http://127.0.0.1:$U/db --admin-url http://127.0.0.1:$A/db \
      --phase push --docs 10000 --doc-size 1024 --batch 200 --connections 4 --rounds 1 --quiet 2>&1 |
      sed -nE 's/.*= ([0-9]+) docs\/s.*/\1/p' | head -1)
    n1=$(ticks $NODE); w1=$(ticks $GWW); c1=$(ticks $GWC)
    echo "round $r $t: $rate docs/s; CPU ticks: node $((n1-n0)), walrus gateway $((w1-w0)), cluster gateway $((c1-c0))"
  done
done
