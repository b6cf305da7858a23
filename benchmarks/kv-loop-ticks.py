#!/usr/bin/env python3
"""Where a KV event loop's time goes, tick by tick, and each request's read-to-write time (ADR 0070).

    benchmarks/kv-loop-ticks.sh NODE_PID [SECONDS]      # records and runs this on the result
    benchmarks/kv-loop-ticks.py SCRIPT.txt [TID,...]    # `perf script -F tid,cpu,time,event,trace` of that record
                                                        # loops: those of the TIDs (the node's threads) that ran
                                                        # channelRead (another process of the same binary may too)

Input: uprobes on `KVConnectionHandler.channelRead` (kvread) and the return of `flushOut` (kvflush__return),
`syscalls:sys_exit_epoll_wait` and `sched:sched_switch`/`sched_wakeup` for the whole machine. A tick is the time
from one return of the loop's `epoll_wait` to the next; it splits into preempted (runnable, not running: switched out
in state R), idle (asleep in epoll_wait), wake delay (woken, not yet running) and work (the rest: on a CPU, the
kernel's work on the loop's behalf included). A request's
read-to-write time runs from its channelRead to the next flushOut's return on that loop (depth 1: one request per
read). For the loops' waits over 1 ms the script also says what ran on the CPUs meanwhile.
"""
import collections
import re
import sys

EVENT = re.compile(r"\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
SWITCH = re.compile(r"prev_comm=(.*) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*) next_pid=(\d+)")
WAKEUP = re.compile(r"comm=.* pid=(\d+) ")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1e3 if values else 0.0


def line(name, values):
    if not values:
        return f"{name:<26} (none)"
    return (f"{name:<26} p50 {pct(values, .5):7.3f}  p90 {pct(values, .9):7.3f}  p99 {pct(values, .99):7.3f}  "
            f"p99.9 {pct(values, .999):7.3f}  max {max(values) * 1e3:7.3f} ms   sum {sum(values) * 1e3:7.0f} ms")


def main(path, threads):
    events = []
    for text in open(path, encoding="utf-8", errors="replace"):
        m = EVENT.match(text)
        if m:
            events.append((float(m[3]), int(m[2]), m[1], m[4], m[5]))
    events.sort(key=lambda e: e[0])
    loops = {tid for _, _, tid, event, _ in events if event.endswith(":kvread") and (not threads or tid in threads)}

    state = {t: dict(tick=None, pre=0.0, idle=0.0, wake=0.0, out=None, runnable=True, woke=None, read=None)
             for t in loops}
    ticks, reads, waits, names, running, timeline = [], [], [], {}, {}, []
    for t, cpu, tid, event, rest in events:
        if event == "sched:sched_wakeup":
            m = WAKEUP.search(rest)
            s = state.get(m[1]) if m else None
            if s and s["out"] is not None and s["woke"] is None:
                s["woke"] = t
            continue
        if event == "sched:sched_switch":
            m = SWITCH.search(rest)
            if not m:
                continue
            prev, prev_state, nxt = m[2], m[3], m[5]
            names[nxt] = m[4]
            if cpu in running:
                timeline.append((running[cpu][0], t, running[cpu][1]))
            running[cpu] = (t, nxt)
            if prev in state:
                s = state[prev]
                s["out"], s["runnable"], s["woke"] = t, prev_state.startswith("R"), None
            if nxt in state and state[nxt]["out"] is not None:
                s = state[nxt]
                if s["runnable"]:
                    s["pre"] += t - s["out"]
                    waited_from = s["out"]
                else:
                    woke = s["woke"] if s["woke"] is not None else t
                    s["idle"] += woke - s["out"]
                    s["wake"] += t - woke
                    waited_from = woke
                if t - waited_from > 0.001:
                    waits.append((waited_from, t))
                s["out"] = None
            continue
        s = state.get(tid)
        if s is None:
            continue
        if event.endswith(":kvread"):
            if s["read"] is None:
                s["read"] = t
        elif event.endswith(":kvflush__return"):
            if s["read"] is not None:
                reads.append(t - s["read"])
                s["read"] = None
        elif event == "syscalls:sys_exit_epoll_wait":
            if s["tick"] is not None:
                ticks.append((t - s["tick"], s["pre"], s["idle"], s["wake"]))
            s["tick"], s["pre"], s["idle"], s["wake"] = t, 0.0, 0.0, 0.0

    print(f"loops {','.join(sorted(loops))}: {len(ticks)} ticks, {len(reads)} requests")
    print(line("request read->write", reads))
    print(line("tick", [a for a, _, _, _ in ticks]))
    print(line("  work (on a CPU)", [a - b - c - d for a, b, c, d in ticks]))
    print(line("  preempted (runnable)", [b for _, b, _, _ in ticks]))
    print(line("  wake delay (runnable)", [d for _, _, _, d in ticks]))
    print(line("  idle in epoll_wait", [c for _, _, c, _ in ticks]))
    who, total = collections.Counter(), 0.0
    for start, end in waits:
        for a, b, tid in timeline:
            overlap = min(b, end) - max(a, start)
            if overlap > 0:
                name = names.get(tid, "?").split("-#")[0] + (" (this node's loops)" if tid in loops else "")
                who[name] += overlap
                total += overlap
    print(f"loop waits over 1 ms: {len(waits)}; what the CPUs ran meanwhile:")
    for name, seconds in who.most_common(8):
        print(f"  {name:<36} {100 * seconds / (total or 1):5.1f}%")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], set(sys.argv[2].split(",")) if len(sys.argv) == 3 else set())
