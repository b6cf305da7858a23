#!/usr/bin/env bash
# Runs fsync-floor for every case of ADR 0072 (3 s each) in a directory on the data disk; prints the load first.
set -euo pipefail
cd "$(dirname "$0")"
DIR=${1:-/tmp/fsync-floor}; SECONDS_PER=${2:-3}
mkdir -p "$DIR"
gcc -O2 -Wall -Wextra -o "$DIR/fsync-floor" fsync-floor.c
echo "# $(date -u +%FT%TZ) $(uname -r) $(uptime)"
echo "# df: $(df -h "$DIR" | tail -1)"
for g in 1 16 32; do "$DIR/fsync-floor" "$DIR" "$SECONDS_PER" append "$g" 1100; done
for g in 1 16 32; do "$DIR/fsync-floor" "$DIR" "$SECONDS_PER" wal "$g" 1100; done
"$DIR/fsync-floor" "$DIR" "$SECONDS_PER" wal 25 16384
"$DIR/fsync-floor" "$DIR" "$SECONDS_PER" wal 23 4096
"$DIR/fsync-floor" "$DIR" "$SECONDS_PER" random 25 16384
"$DIR/fsync-floor" "$DIR" "$SECONDS_PER" random 23 4096
