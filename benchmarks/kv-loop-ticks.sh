#!/usr/bin/env bash
# Records where a running settee-server's KV event loops spend each tick and prints the breakdown
# (benchmarks/kv-loop-ticks.py, ADR 0070). Run it during a load (e.g. `settee-bench run ... --depth 1`); needs root
# (or perf_event_paranoid -1) and perf. Nothing is compiled into the server: two uprobes on its binary
# (KVConnectionHandler.channelRead, the return of flushOut) are added for the recording and removed after it.
#   benchmarks/kv-loop-ticks.sh NODE_PID [SECONDS]          leaves the record in $TMPDIR/kv-loop-ticks.*/
set -euo pipefail
PID=$1; SECONDS_TO_RECORD=${2:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(readlink "/proc/$PID/exe")
OUT=$(mktemp -d "${TMPDIR:-/tmp}/kv-loop-ticks.XXXX")
symbol() { # address of the one symbol matching $1
    nm "$BIN" | awk -v pat="$1" '$3 ~ pat {print "0x" $1; n++} END {if (n != 1) exit 1}'
}
READ=$(symbol '^\$s10SetteeNode19KVConnectionHandlerC11channelRead7context4datay7NIOCore07Channel.*NIOAnyVtF$') ||
    { echo "kv-loop-ticks: channelRead not found once in $BIN (stripped?)" >&2; exit 1; }
FLUSH=$(symbol '^\$s10SetteeNode19KVConnectionHandlerC8flushOut7contexty7NIOCore07Channel.*_tF$') ||
    { echo "kv-loop-ticks: flushOut not found once in $BIN" >&2; exit 1; }
GROUP="kvticks$$"
cleanup() { perf probe -q -d "$GROUP:*" 2>/dev/null || true; }
trap cleanup EXIT
perf probe -q -x "$BIN" -a "$GROUP:kvread=$READ" -a "$GROUP:kvflush=$FLUSH%return"
perf record -q -o "$OUT/perf.data" -e "$GROUP:kvread" -e "$GROUP:kvflush__return" -e syscalls:sys_exit_epoll_wait \
    -e sched:sched_switch -e sched:sched_wakeup -a -- sleep "$SECONDS_TO_RECORD" >/dev/null 2>&1
perf script -i "$OUT/perf.data" -F tid,cpu,time,event,trace >"$OUT/script.txt" 2>/dev/null
"$HERE/kv-loop-ticks.py" "$OUT/script.txt" "$(ls "/proc/$PID/task" | paste -sd,)"
echo "record: $OUT"
