#!/usr/bin/env bash
# Starts a one-node cluster (cluster/up 1) of the server binary BIN, admin port PORT, data under $WORK/NAME.
# The environment is passed on to the server (the held gather's SETTEE_EXP_QUIET_US / SETTEE_EXP_CAP_US).
#   more.sh NAME BIN PORT
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
WORK=${WORK:-/tmp/exp/dwork}
mkdir -p "$WORK"
(cd "$ROOT" && SETTEE_CLUSTER_DATA="$WORK/$1" SETTEE_SERVER_BIN="$2" \
        SETTEE_GATEWAY_BIN=/nonexistent SETTEE_BASE_ADMIN_PORT=$3 SETTEE_BASE_KV_PORT=$(($3 + 1000)) SETTEE_BASE_VIEWS_PORT=$(($3 + 1)) \
        cluster/up 1 >"$WORK/$1.up.log" 2>&1)
