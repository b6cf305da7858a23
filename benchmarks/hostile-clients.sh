#!/usr/bin/env bash
# Hostile clients (issue 16 "Must show"): one node and one gateway (walrus) on 127.0.0.1, a well-behaved client
# measured quiet and then while a never-reading pipeliner, IDLE idle KV connections, slowloris on every HTTP port
# and BAD_LOGINS wrong-password logins a second run together for ATTACK seconds. Prints the node's and gateway's
# peak RSS and CPU and the well-behaved client's latency per phase, and whether the node's RSS stayed under the
# stated bound and the client's p99 within 2x of quiet (exit status 1 if not); stops by itself and cleans up.
#   benchmarks/hostile-clients.sh       (release builds: make release; or SETTEE_SERVER_BIN / SETTEE_GATEWAY_BIN)
#   IDLE=5000 SLOWLORIS=100 BAD_LOGINS=1000 QUIET=10 ATTACK=20 ATTACK_SOURCE=127.0.0.2 benchmarks/hostile-clients.sh
#   ATTACKER_PRIORITY=idle|nice: attacking threads under SCHED_IDLE / nice 19 (attackers on other machines; the node's
#   cost of serving them still counts); exit status 2 (run invalid) if an attack then fell short of its rate.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
IDLE=${IDLE:-5000}; SLOWLORIS=${SLOWLORIS:-100}; BAD_LOGINS=${BAD_LOGINS:-1000}; QUIET=${QUIET:-10}; ATTACK=${ATTACK:-20}
ATTACK_SOURCE=${ATTACK_SOURCE:-127.0.0.2}; ATTACKER_PRIORITY=${ATTACKER_PRIORITY:-normal}
[ -x "$BIN" ] && [ -x "$GW_BIN" ] || { echo "hostile-clients: $BIN or $GW_BIN missing (make release)" >&2; exit 1; }
# The attackers hold IDLE + slowloris descriptors; the node and gateway raise their own limit at start.
ulimit -n "$(ulimit -Hn)"
WORK=$(mktemp -d)
GW_PID=""
trap 'kill $SETTEE_PID ${GW_PID:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
start_settee "$WORK/node"
init_settee 512
start_gateway "$WORK/gw" "walrus:"
echo "node pid $SETTEE_PID (kv $KV_PORT, admin $ADMIN_PORT, views $VIEWS_PORT); gateway pid $GW_PID ($GW_PORT, $GW_ADMIN_PORT)"
echo "binaries: $BIN, $GW_BIN; load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
timeout $(( QUIET * 2 + ATTACK + 60 )) python3 hostile_clients.py --kv-port "$KV_PORT" --admin-port "$ADMIN_PORT" \
    --views-port "$VIEWS_PORT" --node-pid "$SETTEE_PID" --gw-port "$GW_PORT" --gw-admin-port "$GW_ADMIN_PORT" \
    --gw-pid "$GW_PID" --quiet-seconds "$QUIET" --attack-seconds "$ATTACK" --idle "$IDLE" --slowloris "$SLOWLORIS" \
    --bad-logins "$BAD_LOGINS" --attack-source "$ATTACK_SOURCE" --attacker-priority "$ATTACKER_PRIORITY" || status=$?
kill -0 "$SETTEE_PID" && kill -0 "$GW_PID" && echo "node and gateway still running"
exit "$status"
