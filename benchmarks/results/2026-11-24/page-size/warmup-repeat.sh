#!/usr/bin/env bash
# ADR 0072: warmup after kill -9 of the same two data directories (1,000,000 x 1 KiB, loaded once by each binary),
# restarted alternately OLD, NEW, ROUNDS times; each restart is killed -9 again, so every warmup is an unclean one.
#   warmup-repeat.sh OLD_SERVER NEW_SERVER ROUNDS
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); cd "$HERE/../../.."
OLD=$1; NEW=$2; ROUNDS=${3:-3}
source ./lib.sh
WORK=$(mktemp -d); trap 'kill -9 $SETTEE_PID 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT
for which in old new; do
    BIN=$OLD; [ "$which" = new ] && BIN=$NEW
    unset ADMIN_PORT KV_PORT VIEWS_PORT
    start_settee "$WORK/$which"; init_settee 8192
    echo "load $which: $(python3 kvload.py --port "$KV_PORT" --items 1000000 --value-size 1024 --wait-persisted) ($(uptime | sed 's/.*load/load/'))"
    kill -9 "$SETTEE_PID"; wait "$SETTEE_PID" 2>/dev/null || true
done
for i in $(seq 1 "$ROUNDS"); do
    for which in old new; do
        BIN=$OLD; [ "$which" = new ] && BIN=$NEW
        unset ADMIN_PORT KV_PORT VIEWS_PORT
        start_settee "$WORK/$which"
        python3 -c "
import socket,sys; sys.path.insert(0,'.'); import kvload
s=socket.create_connection(('127.0.0.1',$KV_PORT)); st=kvload.stats(s)
n,us=int(st['ep_warmup_value_count']),int(st['ep_warmup_time'])
print(f'round $i $which: {n} items in {us/1e6:.2f} s = {n/(us/1e6):,.0f} docs/s', end=' ')"
        echo "($(uptime | sed 's/.*load/load/'))"
        kill -9 "$SETTEE_PID"; wait "$SETTEE_PID" 2>/dev/null || true
    done
done
