#!/usr/bin/env bash
# Server CPU per operation: a fixed number of ops against a memcached-binary endpoint, and the serving process's
# user+system CPU (from /proc/PID/stat) over the run. Robust to a noisy machine in a way throughput is not.
# Then the same per thread, grouped by thread name without its number (a settee node: NIO-ELT-* event loops,
# settee-flusher-*): user and system µs per op, and the seconds each group ran and waited runnable
# (/proc/PID/task/TID/schedstat) over the run (ADR 0076).
#   benchmarks/cpu-per-op.sh PORT PID [settee-bench run options...]     e.g. ... 11210 $(pgrep -n memcached) --depth 16
set -euo pipefail
PORT=$1; PID=$2; shift 2
BENCH="$(cd "$(dirname "$0")" && pwd)/.build/release/settee-bench"
OPS=1000000
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
# One line per thread: name, utime, stime (ticks), ran, waited (ns). A thread may end between the reads.
threads() { for t in /proc/"$PID"/task/*; do
    echo "$(tr ' ' _ 2>/dev/null <"$t/comm") $(awk '{print $14, $15}' "$t/stat" 2>/dev/null) $(awk '{print $1, $2}' "$t/schedstat" 2>/dev/null)"
done; }
TA=$(mktemp); TB=$(mktemp); trap 'rm -f "$TA" "$TB"' EXIT
threads >"$TA"
before=$(cpu)
"$BENCH" run --target "memcached-binary=127.0.0.1:$PORT" --no-preload --warmup 0s --quiet --ops "$OPS" "$@" >/dev/null
after=$(cpu)
threads >"$TB"
python3 -c "import sys; t=(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[3]); print(f'{t:.2f} s CPU for {int(sys.argv[4]):,} ops = {t*1e6/int(sys.argv[4]):.2f} µs per op')" \
    "$before" "$after" "$(getconf CLK_TCK)" "$OPS"
python3 - "$TA" "$TB" "$(getconf CLK_TCK)" "$OPS" <<'PY'
import sys
def read(path):
    groups = {}
    for line in open(path):
        f = line.split()
        if len(f) != 5: continue
        name = f[0].rstrip("0123456789-_#") or f[0]
        g = groups.setdefault(name, [0, 0, 0, 0])
        for i in range(4): g[i] += int(f[i + 1])
    return groups
a, b, hz, ops = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for name in sorted(b):
    d = [x - y for x, y in zip(b[name], a.get(name, [0, 0, 0, 0]))]
    if d[0] + d[1] <= 0: continue
    print(f"  {name:20s} user {d[0] / hz * 1e6 / ops:.2f}  system {d[1] / hz * 1e6 / ops:.2f} µs per op;"
          f"  ran {d[2] / 1e9:.2f} s, waited runnable {d[3] / 1e9:.2f} s")
PY
