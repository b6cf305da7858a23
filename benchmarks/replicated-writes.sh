#!/usr/bin/env bash
# Replicated writes against the bucket's size (ADR 0077): a 3-node cluster (replicaNumber 1), a bucket holding
# KEYS items of VALUE_SIZE bytes, then plain sets (and, with DURABILITY=majority, majority-durable ones) through the
# smart client at depth 1; reports ops/s and the three nodes' CPU (user + system from /proc) per write, split by thread,
# and the flushers' transactions (ep_commit_num, ep_total_persisted over STAT, ADR 0082), and each node's RSS beside
# the memory its bucket accounts for (mem_used) before and after the writes: memory a write leaves behind outside the
# bucket's quota shows as RSS growing while mem_used does not (ADR 0083's leak did: ~1 KiB per write). Each write
# is streamed to its replica, so the DCP producer's change-feed read is in every write's path. With two server
# binaries it alternates them, ROUNDS times each, on fresh clusters.
#   benchmarks/replicated-writes.sh SERVER_BIN [OTHER_SERVER_BIN]
#   env: KEYS (1000000), VALUE_SIZE (256), OPS (100000), CONNECTIONS (32), ROUNDS (3), DURABILITY (none)
# Needs the benchmarks package's release settee-bench (cd benchmarks && swift build -c release --product settee-bench).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd .. && pwd)
KEYS=${KEYS:-1000000}; VALUE_SIZE=${VALUE_SIZE:-256}; OPS=${OPS:-100000}; CONNECTIONS=${CONNECTIONS:-32}
ROUNDS=${ROUNDS:-3}; DURABILITY=${DURABILITY:-none}
BENCH="$PWD/.build/release/settee-bench"
[ -x "$BENCH" ] || { echo "replicated-writes: $BENCH missing" >&2; exit 1; }
BINS=("$@"); [ ${#BINS[@]} -ge 1 ] || { echo "usage: $0 SERVER_BIN [OTHER_SERVER_BIN]" >&2; exit 2; }
WORK=$(mktemp -d)
BASE=$(( 36000 + RANDOM % 3000 ))
export SETTEE_BASE_ADMIN_PORT=$BASE SETTEE_BASE_KV_PORT=$((BASE + 1000)) SETTEE_BASE_VIEWS_PORT=$((BASE + 1))
export SETTEE_GATEWAY_BIN=/nonexistent
trap '(cd "$ROOT" && cluster/down >/dev/null 2>&1) || true; rm -rf "$WORK"' EXIT
A=(-u Administrator:password)
TARGET="c@settee=127.0.0.1:$BASE"
[ "$DURABILITY" = none ] || TARGET="$TARGET,durability=$DURABILITY"
cpu() { for p in $(pgrep -f "settee-server --data-dir $WORK/"); do awk '{print $14 + $15}' "/proc/$p/stat"; done \
    | awk '{s += $1} END {print s}'; }
# CPU ticks per thread name over the three nodes (event loops, flusher, pools).
threads() { for p in $(pgrep -f "settee-server --data-dir $WORK/"); do for t in /proc/"$p"/task/*; do
    echo "$(tr ' ' _ <"$t/comm") $(awk '{print $14 + $15}' "$t/stat")"; done; done | awk '{s[$1] += $2} END {for (k in s) print k, s[k]}' | sort; }
# Each node's RSS in MB, in pid order (the order `cluster/up` started them).
rss() { for p in $(pgrep -f "settee-server --data-dir $WORK/" | sort -n); do awk '/VmRSS/ {printf "%d ", $2 / 1024}' "/proc/$p/status"; done; }
# Flusher transactions and rows persisted, summed over the nodes (ep_commit_num, ep_total_persisted over STAT), then
# each node's mem_used in MB.
commits() { python3 - "$BASE" <<'PY'
import socket, struct, sys
def call(s, op, key=b"", val=b""):
    s.sendall(struct.pack(">BBHBBHIIQ", 0x80, op, len(key), 0, 0, 0, len(key) + len(val), 0, 0) + key + val)
def reply(s):
    h = b""
    while len(h) < 24: h += s.recv(24 - len(h))
    kl, el, bl = struct.unpack(">H", h[2:4])[0], h[4], struct.unpack(">I", h[8:12])[0]
    b = b""
    while len(b) < bl: b += s.recv(bl - len(b))
    return b[el:el + kl], b[el + kl:]
total = {b"ep_commit_num": 0, b"ep_total_persisted": 0}
used = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1]) + 1000 + 10 * i))
    call(s, 0x21, b"PLAIN", b"\0Administrator\0password"); reply(s)
    call(s, 0x89, b"bench"); reply(s)
    call(s, 0x10)
    while True:
        k, v = reply(s)
        if not k: break
        if k in total: total[k] += int(v)
        if k == b"mem_used": used.append(int(v) // (1 << 20))
print(total[b"ep_commit_num"], total[b"ep_total_persisted"], *used)
PY
}
echo "keys $KEYS x $VALUE_SIZE B, $OPS sets, $CONNECTIONS connections x depth 1, durability $DURABILITY"
for round in $(seq 1 "$ROUNDS"); do
    for bin in "${BINS[@]}"; do
        export SETTEE_SERVER_BIN="$bin" SETTEE_CLUSTER_DATA="$WORK/cluster"
        (cd "$ROOT" && cluster/up 3 >"$WORK/up.log")
        curl -sf "${A[@]}" -X POST "http://127.0.0.1:$BASE/pools/default" -d memoryQuota=3072 >/dev/null
        curl -sf "${A[@]}" "http://127.0.0.1:$BASE/pools/default/buckets" -d name=bench -d ramQuotaMB=2048 \
            -d replicaNumber=1 -d authType=none >/dev/null
        sleep 3
        "$BENCH" run --target "c@settee=127.0.0.1:$BASE" --bucket bench --mix set=100 --value-size "$VALUE_SIZE" \
            --keys "$KEYS" --ops 1 --connections 32 --quiet >/dev/null
        sleep "${SETTLE:-2}"
        a=$(cpu); threads >"$WORK/threads.a"; c0=$(commits); r0=$(rss)
        out=$("$BENCH" run --target "$TARGET" --bucket bench --mix set=100 --value-size "$VALUE_SIZE" --keys "$KEYS" \
            --ops "$OPS" --connections "$CONNECTIONS" --depth 1 --no-preload --quiet 2>&1)
        echo "$out" >>"${LOG:-/dev/null}"
        b=$(cpu); threads >"$WORK/threads.b"; c1=$(commits); r1=$(rss)
        ops=$(echo "$out" | awk '/^throughput/ {print $2}')
        p50=$(echo "$out" | awk '/^all/ {print $4}')
        echo "round $round $(basename "$(dirname "$bin")")/$(basename "$bin"): $ops ops/s, p50 $p50 us," \
            "server CPU $(python3 -c "print(f'{($b - $a) / $(getconf CLK_TCK) * 1e6 / $OPS:.0f}')") us per write," \
            "load $(cut -d' ' -f1 /proc/loadavg)"
        echo "  flusher: $(echo "$(echo "$c0" | cut -d' ' -f1-2) $(echo "$c1" | cut -d' ' -f1-2)" | awk -v ops="$OPS" '{printf "%d commits, %.1f rows each, %.2f rows per write", $3 - $1, ($4 - $2) / ($3 - $1 + 0.000001), ($4 - $2) / ops}');" \
            "CPU per write by thread: $(join "$WORK/threads.a" "$WORK/threads.b" | awk -v ops="$OPS" -v hz="$(getconf CLK_TCK)" \
                '{d = ($3 - $2) / hz * 1e6 / ops; if (d >= 0.5) printf "%s %.1f us, ", $1, d}')"
        echo "  memory per node, MB: RSS $r0-> $r1(mem_used $(echo "$c0" | cut -d' ' -f3-) -> $(echo "$c1" | cut -d' ' -f3-))"
        (cd "$ROOT" && cluster/down >/dev/null 2>&1)
        [ -z "${LOG:-}" ] || cat "$WORK"/cluster/n*.log >>"$LOG"
        rm -rf "$WORK/cluster"
    done
done
