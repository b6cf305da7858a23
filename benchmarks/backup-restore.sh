#!/usr/bin/env bash
# Backup and restore throughput of one node (issue 72's row, ADR 0147), against copying the same bytes as the ceiling:
#   1. load ITEMS x VALUE_SIZE JSON docs (pipelined quiet SETs, kvload.py; each body a different slice of seeded
#      random words, so values compress as text does, not to nothing) into bucket `bench`, wait until persisted;
#   2. the ceiling: `tar` of the node's data directory (every byte the node keeps on disk) into a file, then `tar -x`
#      of that file into an empty directory followed by `sync` (the page cache is warm for both, as for the node);
#   3. `settee backup --full` of `bench` into an empty repository (change streams, LZ4 segments, fsynced), then
#      `settee backup verify` (every segment read back and checked);
#   4. `settee restore` of that backup into a second bucket `restored` on the same node (SET_WITH_META through the
#      smart client), then the wait until `restored` has persisted every item (`ep_queue_size` 0).
# Figures: wall seconds of each command, items/s, and MiB/s of the items' key + value bytes (ITEMS x (13 + VALUE_SIZE));
# tar's MiB/s are of the bytes it copied (the data directory); ratios are settee's seconds over tar's.
#   ITEMS=1000000 VALUE_SIZE=1024 benchmarks/backup-restore.sh
# env: OUT (directory of the .txt), JSON (also write the figures there), NAME (their name), SETTEE_CLI_BIN.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
ITEMS=${ITEMS:-1000000}; VALUE_SIZE=${VALUE_SIZE:-1024}
CLI="${SETTEE_CLI_BIN:-$(cd .. && pwd)/.build/release/settee}"
[ -x "$CLI" ] || { echo "backup-restore: $CLI missing (swift build -c release --product settee)" >&2; exit 1; }
OUT="${OUT:-results/$(date +%Y-%m-%d)}"; mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'kill -9 $SETTEE_PID 2>/dev/null || true; wait 2>/dev/null; rm -rf "$WORK"' EXIT
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b-a}'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.0f", n/s}'; }
mibs() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.1f", n/1048576/s}'; }
# Waits until bucket $1 reports an empty write queue (every item persisted; /metrics' flusher queue gauge).
wait_persisted() {
    until curl -sf -u Administrator:password "http://127.0.0.1:$ADMIN_PORT/metrics" |
        grep -Eq "^settee_bucket_flusher_queue_items\{bucket=\"$1\"\} 0(\.0)?$"; do
        sleep 0.2
    done
}

mkdir -p "$WORK/node"
start_settee "$WORK/node/data"
init_settee 4096
load=$(python3 kvload.py --port "$KV_PORT" --items "$ITEMS" --value-size "$VALUE_SIZE" --values varied --wait-persisted)
BYTES=$(( ITEMS * (13 + VALUE_SIZE) ))
DATA_KB=$(du -sk "$WORK/node/data" | cut -f1)
export SETTEE_CLUSTER="http://127.0.0.1:$ADMIN_PORT" SETTEE_USERNAME=Administrator SETTEE_PASSWORD=password

# The ceiling: the same node's files copied whole.
t0=$(now); tar -cf "$WORK/data.tar" -C "$WORK/node" data; sync -f "$WORK/data.tar"; t1=$(now)
TAR_BYTES=$(stat -c %s "$WORK/data.tar")
mkdir -p "$WORK/untar"; t2=$(now); tar -xf "$WORK/data.tar" -C "$WORK/untar"; sync -f "$WORK/untar"; t3=$(now)
rm -rf "$WORK/untar"

t4=$(now); backup=$("$CLI" backup --repo "$WORK/repo" --bucket bench --full); t5=$(now)
REPO_KB=$(du -sk "$WORK/repo" | cut -f1)
t6=$(now); "$CLI" backup verify --repo "$WORK/repo" --bucket bench >/dev/null; t7=$(now)
rm -f "$WORK/data.tar"
curl -sf -u Administrator:password -d name=restored -d ramQuotaMB=4096 -d authType=none -d replicaNumber=0 \
    "http://127.0.0.1:$ADMIN_PORT/pools/default/buckets" >/dev/null
until curl -sf -u Administrator:password "http://127.0.0.1:$ADMIN_PORT/pools/default/buckets/restored" |
    grep -q '"vBucketMap"'; do sleep 0.2; done
t8=$(now); restore=$("$CLI" restore --repo "$WORK/repo" --bucket bench --map-data bench=restored); t9=$(now)
wait_persisted restored; t10=$(now)

tar_c=$(secs "$t0" "$t1"); tar_x=$(secs "$t2" "$t3"); b=$(secs "$t4" "$t5"); v=$(secs "$t6" "$t7")
r=$(secs "$t8" "$t9"); rp=$(secs "$t8" "$t10")
summary="$ITEMS x $VALUE_SIZE B JSON docs ($(mibs "$BYTES" 1) MiB of keys + values); $load
data directory: $DATA_KB kB; repository after the full backup: $REPO_KB kB
tar -c of the data directory (+ sync): $tar_c s = $(mibs "$TAR_BYTES" "$tar_c") MiB/s of its $TAR_BYTES bytes
tar -x into an empty directory (+ sync): $tar_x s = $(mibs "$TAR_BYTES" "$tar_x") MiB/s
settee backup --full: $b s = $(rate "$ITEMS" "$b") items/s = $(mibs "$BYTES" "$b") MiB/s ($(awk -v a="$b" -v t="$tar_c" 'BEGIN {printf "%.2f", a/t}') x tar -c's time)
  $backup
settee backup verify: $v s = $(rate "$ITEMS" "$v") items/s = $(mibs "$BYTES" "$v") MiB/s
settee restore (into bucket restored): $r s = $(rate "$ITEMS" "$r") items/s = $(mibs "$BYTES" "$r") MiB/s ($(awk -v a="$r" -v t="$tar_x" 'BEGIN {printf "%.2f", a/t}') x tar -x's time)
  $restore
restore until persisted: $rp s = $(rate "$ITEMS" "$rp") items/s = $(mibs "$BYTES" "$rp") MiB/s"
echo "$summary" | tee "$OUT/backup-restore.txt"
if [ -n "${JSON:-}" ]; then
    python3 - "$JSON" "${NAME:-backup-restore}" "$ITEMS" "$VALUE_SIZE" "$BYTES" "$DATA_KB" "$REPO_KB" "$TAR_BYTES" \
        "$tar_c" "$tar_x" "$b" "$v" "$r" "$rp" <<'PY'
import json, sys
a = sys.argv
items, nbytes, tar_bytes = int(a[3]), int(a[5]), int(a[8])
tar_c, tar_x, b, v, r, rp = (float(x) for x in a[9:15])
mib = lambda n, s: n / 1048576 / s if s else 0
out = {
    "name": a[2], "items": items, "valueSize": int(a[4]), "itemBytes": nbytes,
    "dataDirectoryKB": int(a[6]), "repositoryKB": int(a[7]), "tarBytes": tar_bytes,
    "tarCreateSeconds": tar_c, "tarCreateMiBPerSecond": mib(tar_bytes, tar_c),
    "tarExtractSeconds": tar_x, "tarExtractMiBPerSecond": mib(tar_bytes, tar_x),
    "backupSeconds": b, "backupItemsPerSecond": items / b, "backupMiBPerSecond": mib(nbytes, b),
    "verifySeconds": v, "verifyItemsPerSecond": items / v, "verifyMiBPerSecond": mib(nbytes, v),
    "restoreSeconds": r, "restoreItemsPerSecond": items / r, "restoreMiBPerSecond": mib(nbytes, r),
    "restorePersistedSeconds": rp, "restorePersistedItemsPerSecond": items / rp,
    "backupOverTar": b / tar_c, "restoreOverTar": r / tar_x,
}
json.dump(out, open(a[1], "w"), indent=2)
PY
fi
