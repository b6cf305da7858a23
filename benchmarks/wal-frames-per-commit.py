#!/usr/bin/env python3
"""WAL frames per commit from an strace of a settee-server (ADR 0067).

    strace -q -f -p NODE_PID -e trace=pwrite64,fdatasync -o trace.txt &   # during a durable-set run
    benchmarks/wal-frames-per-commit.py trace.txt

SQLite writes each WAL frame as a 24-byte header (page number: first 4 bytes, big-endian) and then the page;
a commit ends with fdatasync. Prints, per file: commits, frames per commit, how often page 1 is written, and
pages written twice within one commit.
"""
import re
import sys

WRITE = re.compile(r'pwrite64\((\d+), "(.*)", (\d+), (\d+)\) = (\d+)$')

for path in sys.argv[1:]:
    commits, current = [], []
    for line in open(path, encoding="latin1"):
        m = WRITE.search(line)
        if m:
            if int(m.group(3)) == 24:
                header = m.group(2).encode("latin1").decode("unicode_escape").encode("latin1")
                current.append(int.from_bytes(header[:4], "big"))
            continue
        if "fdatasync" in line and "= 0" in line and current:
            commits.append(current)
            current = []
    n = len(commits) or 1
    frames = sum(len(c) for c in commits)
    page1 = sum(c.count(1) for c in commits)
    repeated = sum(len(c) - len(set(c)) for c in commits)
    print(f"{path}: commits {len(commits)}, WAL frames/commit {frames / n:.2f}, page 1/commit {page1 / n:.2f}, "
          f"repeated pages/commit {repeated / n:.2f}")
