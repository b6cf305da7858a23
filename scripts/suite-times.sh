#!/usr/bin/env bash
# Runs every test suite of the built test bundle alone, one after another, and prints each suite's wall, user and
# system seconds (the servers and other children a suite starts and waits for included), most CPU first.
# `make test` runs suites side by side, where a suite's own cost cannot be told apart; this is how to find what
# to shorten (ADR 0101). Needs `swift build --build-tests` first; takes about 15 minutes on 2 cores.
#   usage: scripts/suite-times.sh [OUT_DIR]   (default test-output/suite-times; one log per suite there)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-test-output/suite-times}"
mkdir -p "$out"
times="$out/times.txt"
: >"$times"
swift test list --skip-build 2>/dev/null | grep -v '^\[' | sed -E 's/^([^.]+\.[^/]+)\/.*/\1/' | sort -u >"$out/suites.txt"
while read -r suite; do
    # The filter matches "Module.Suite/test"; the leading dot keeps "FooTests" from matching "BarFooTests".
    /usr/bin/time -f "%e %U %S $suite" -a -o "$times" \
        swift test --skip-build --filter "\\.${suite#*.}/" >"$out/$suite.log" 2>&1 || echo "FAILED $suite" >>"$times"
done <"$out/suites.txt"
grep -v '^FAILED' "$times" | awk '{printf "%8.1f cpu %8.1f wall  %s\n", $2 + $3, $1, $4}' | sort -rn
awk '!/^FAILED/ {c += $2 + $3; w += $1} END {printf "all %d suites: %.0f s cpu, %.0f s wall\n", NR, c, w}' "$times"
grep '^FAILED' "$times" || true
