#!/usr/bin/env bash
# ADR 0090's setup: two one-node clusters (cluster/up) from two server binaries, BASE_BIN and NEW_BIN, and a redis
# with appendonly yes, appendfsync always; prints (and writes to /tmp/exp/durable2.env) CB, CN and REDIS. Then:
#   settee-bench compare --target redis-always@redis=127.0.0.1:$REDIS \
#     --target base@settee=127.0.0.1:$CB,durability=persistToMajority \
#     --target new@settee=127.0.0.1:$CN,durability=persistToMajority \
#     --mix get=0,set=100 --value-size 1024 --keys 100000 --connections 32 --depth 1 --duration 5s --rounds 3
# Run from a checkout's benchmarks/ directory's sibling layout (it cds to /work/main/benchmarks; change ROOT).
set -euo pipefail
cd /work/main/benchmarks
source ./lib.sh
ROOT=$(cd .. && pwd)
mkdir -p /tmp/exp; WORK=/tmp/exp/dwork; rm -rf $WORK; mkdir -p $WORK
REDIS=$(free_port); mkdir -p "$WORK/redis-always"
redis-server --port "$REDIS" --bind 127.0.0.1 --dir "$WORK/redis-always" --appendonly yes \
    --appendfsync always --save "" --daemonize no --logfile "$WORK/redis-always.log" &
up() { # name bin base
(cd "$ROOT" && SETTEE_CLUSTER_DATA="$WORK/$1" SETTEE_SERVER_BIN="$2" \
        SETTEE_GATEWAY_BIN=/nonexistent SETTEE_BASE_ADMIN_PORT=$3 SETTEE_BASE_KV_PORT=$(($3 + 1000)) SETTEE_BASE_VIEWS_PORT=$(($3 + 1)) \
        cluster/up 1 >"$WORK/$1.up.log" 2>&1)
}
CB=$(( 30000 + RANDOM % 5000 )); CN=$((CB + 100))
up base ${BASE_BIN:-/tmp/base/settee-server} $CB
up new ${NEW_BIN:-/tmp/exp/new-server} $CN
echo "CB=$CB CN=$CN REDIS=$REDIS" > /tmp/exp/durable2.env
cat /tmp/exp/durable2.env
