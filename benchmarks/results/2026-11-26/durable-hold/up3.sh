#!/usr/bin/env bash
# ADR 0094's setup: redis with appendfsync always and two one-node clusters, BASE_BIN and NEW_BIN (started with the
# environment in HOLDENV, e.g. HOLDENV="SETTEE_EXP_QUIET_US=150 SETTEE_EXP_CAP_US=1000" for a build with
# flusher-hold.diff applied); prints CB, CN and REDIS (also in $WORK/ports.env) for settee-bench compare (output.txt).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source ./lib.sh
export WORK=${WORK:-/tmp/exp/dwork}; rm -rf "$WORK"; mkdir -p "$WORK/redis-always"
REDIS=$(free_port)
setsid redis-server --port "$REDIS" --bind 127.0.0.1 --dir "$WORK/redis-always" --appendonly yes \
    --appendfsync always --save "" --daemonize yes --logfile "$WORK/redis-always.log"
CB=$(( 30000 + RANDOM % 5000 ))
bash "$here/more.sh" base "$BASE_BIN" $CB
env ${HOLDENV:-X=1} bash "$here/more.sh" new "$NEW_BIN" $((CB + 100))
echo "CB=$CB CN=$((CB + 100)) REDIS=$REDIS" | tee "$WORK/ports.env"
