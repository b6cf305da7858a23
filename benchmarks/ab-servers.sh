#!/usr/bin/env bash
# Two settee-server builds against each other (and memcached) in one `settee-bench compare` run, so rounds of both
# alternate under the same machine noise: each node fresh, every target preloaded and left 8 s to settle (the
# flusher), then measured with --no-preload. Prints the compare table and each node's CPU (user + system, from
# /proc/PID/stat, flusher included) per operation counted (ADR 0114).
#   benchmarks/ab-servers.sh BASE_BIN NEW_BIN [settee-bench options...]
#   e.g. benchmarks/ab-servers.sh /tmp/base/settee-server .build/release/settee-server --connections 16 --depth 16
#   ROUNDS=6 DURATION=4s (defaults); the mix is get=90,set=10 with 1 KiB values over 100,000 keys unless given.
#   NEW_SETUP='shell commands' runs once both nodes are up, with $BPID the new node's pid (e.g. a scheduling change
#   made from outside, ADR 0115); JSON=FILE keeps the compare's rounds (per-round percentiles).
#   DURABILITY=persistToMajority (or another level): the suite's durable-vs-redis-always shape instead. Both nodes are
#   reached through the smart client (each a one-node cluster) with every write at that level, the peer is a redis
#   with appendfsync always, and the load is 100% sets over 32 connections at depth 1 unless given.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
BASE=$1; NEW=$2; shift 2
ROUNDS=${ROUNDS:-6}; DURATION=${DURATION:-4s}
BENCH=.build/release/settee-bench
WORK=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null; [ -z "${JSON:-}" ] || cp "$WORK/compare.json" "$JSON" 2>/dev/null; rm -rf "$WORK"' EXIT
if [ -n "${DURABILITY:-}" ]; then
    LOAD=(--mix set=100 --value-size 1024 --keys 100000 --connections 32 --depth 1 --username Administrator
        --password password "$@")
    PEER=$(free_port); mkdir -p "$WORK/redis"
    redis-server --port "$PEER" --bind 127.0.0.1 --dir "$WORK/redis" --appendonly yes --appendfsync always --save "" \
        --daemonize no --logfile "$WORK/redis.log" & PIDS+=($!)
    PEER_TARGET="redis-always@redis=127.0.0.1:$PEER"
else
    LOAD=(--mix get=90,set=10 --value-size 1024 --keys 100000 "$@")
    PEER=$(free_port); memcached -u "$(id -un)" -l 127.0.0.1 -p "$PEER" -U 0 -t 2 -m 4096 >/dev/null 2>&1 & PIDS+=($!)
    PEER_TARGET="mc@memcached-binary=127.0.0.1:$PEER"
fi
# A node's target: memcached-binary straight to its KV port, or the smart client at its admin port with DURABILITY.
node_target() { # NAME KV_PORT ADMIN_PORT
    if [ -n "${DURABILITY:-}" ]; then echo "$1@settee=127.0.0.1:$3,durability=$DURABILITY"
    else echo "$1@memcached-binary=127.0.0.1:$2"; fi
}
BIN=$BASE; ADMIN_PORT=; KV_PORT=; VIEWS_PORT=; start_settee "$WORK/base"; init_settee 4096
A=$(node_target base "$KV_PORT" "$ADMIN_PORT"); APID=$SETTEE_PID
PIDS+=("$APID")
BIN=$NEW; ADMIN_PORT=; KV_PORT=; VIEWS_PORT=; start_settee "$WORK/new"; init_settee 4096
B=$(node_target new "$KV_PORT" "$ADMIN_PORT"); BPID=$SETTEE_PID
PIDS+=("$BPID")
wait_port "$PEER"
if [ -n "${NEW_SETUP:-}" ]; then eval "$NEW_SETUP"; fi
# The preload (a one-second run writes every key first); the peer has no buckets.
"$BENCH" run --target "${PEER_TARGET#*@}" "${LOAD[@]}" --duration 1s --warmup 0s --quiet >/dev/null 2>&1 || true
for t in "$A" "$B"; do
    "$BENCH" run --target "${t#*@}" --bucket bench "${LOAD[@]}" --duration 1s --warmup 0s --quiet >/dev/null 2>&1 || true
done
sleep 8
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
a0=$(cpu "$APID"); b0=$(cpu "$BPID")
"$BENCH" compare --target "$PEER_TARGET" --target "$A" --target "$B" --bucket bench "${LOAD[@]}" --duration "$DURATION" \
    --rounds "$ROUNDS" --no-preload --quiet --json "$WORK/compare.json" 2>/dev/null | tail -4 | head -3
a1=$(cpu "$APID"); b1=$(cpu "$BPID")
python3 - "$WORK/compare.json" "$a0" "$a1" "$b0" "$b1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
path, a0, a1, b0, b1, hz = sys.argv[1], *map(int, sys.argv[2:])
ops = {}
for r in json.load(open(path))["rounds"]:
    for t in r:
        ops[t["target"]] = ops.get(t["target"], 0) + t["ops"]
print("CPU per operation counted: base %.2f µs, new %.2f µs (%d and %d operations)"
      % ((a1 - a0) / hz * 1e6 / ops["base"], (b1 - b0) / hz * 1e6 / ops["new"], ops["base"], ops["new"]))
PY
