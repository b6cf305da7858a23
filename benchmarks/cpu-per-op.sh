#!/usr/bin/env bash
# Server CPU per operation: a fixed number of ops against a memcached-binary endpoint, and the serving process's
# user+system CPU (from /proc/PID/stat) over the run. Robust to a noisy machine in a way throughput is not.
#   benchmarks/cpu-per-op.sh PORT PID [settee-bench run options...]     e.g. ... 11210 $(pgrep -n memcached) --depth 16
set -euo pipefail
PORT=$1; PID=$2; shift 2
BENCH="$(cd "$(dirname "$0")" && pwd)/.build/release/settee-bench"
OPS=1000000
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
before=$(cpu)
"$BENCH" run --target "memcached-binary=127.0.0.1:$PORT" --no-preload --warmup 0s --quiet --ops "$OPS" "$@" >/dev/null
after=$(cpu)
python3 -c "import sys; t=(int(sys.argv[2])-int(sys.argv[1]))/int(sys.argv[3]); print(f'{t:.2f} s CPU for {int(sys.argv[4]):,} ops = {t*1e6/int(sys.argv[4]):.2f} µs per op')" \
    "$before" "$after" "$(getconf CLK_TCK)" "$OPS"
