#!/usr/bin/env bash
# A/B of the tombstone purge (ADR 0095) on the KV hot path: two one-node servers side by side, settee-bench compare.
# Two one-node settee servers (BASE_BIN, NEW_BIN) side by side; settee-bench compare on each mix.
set -euo pipefail
cd /work/main/benchmarks
source ./lib.sh
W=$(mktemp -d)
trap 'kill $A $B 2>/dev/null; wait 2>/dev/null; rm -rf $W' EXIT
BIN=$BASE_BIN; ADMIN_PORT= KV_PORT= VIEWS_PORT=; start_settee $W/base; A=$SETTEE_PID; init_settee 4096; AKV=$KV_PORT
BIN=$NEW_BIN; ADMIN_PORT= KV_PORT= VIEWS_PORT=; start_settee $W/new; B=$SETTEE_PID; init_settee 4096; BKV=$KV_PORT
for mix in get=90,set=10 get=0,set=100; do
  echo "== $mix"
  .build/release/settee-bench compare --target base@memcached-binary=127.0.0.1:$AKV --target new@memcached-binary=127.0.0.1:$BKV \
    --mix $mix --value-size 1024 --keys 100000 --connections 32 --depth 1 --duration 5s --rounds ${ROUNDS:-3} 2>&1 | tail -5
done
