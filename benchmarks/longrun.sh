#!/usr/bin/env bash
# Issue 71's long-run benchmark (ADR 0155): a 3-node cluster (cluster/up) with bucket `demo` (replicaNumber 1,
# purgeInterval 0.04 days, the least the bucket accepts) and buckets `fresh` and `trees`, one settee-gateway with
# database `demo` (revs_limit 20, the least with conflicts allowed; meta_purge_interval $PURGE_DAYS days;
# old_rev_expiry_seconds $OLD_REV_EXPIRY, ADR 0156), database `fresh` and database `trees` (meta_purge_interval 30
# days: the copied tombstones stay for the pulls)
# on them, then `longrun.py`: DOCS documents, OPS operations (70 % updates, 10 % conflicting updates from a second
# replicator, 15 % deletes and re-creates, 5 % users and grants), a sample every OPS/10 operations of `_sync` bytes
# and disk bytes per live document with a pass/fail on the last five samples, then fresh pulls of the final state
# against pulls of the same documents written once (`fresh`) and of the same revision trees written once (`trees`).
# Everything on 127.0.0.1; stopped at exit.
#   env: OPS (1000000), DOCS (10000), WORKERS (4), PURGE_DAYS (0.001 = 86.4 s), OLD_REV_EXPIRY (60 s),
#        COMPACT_EVERY (10000), COMPACTION_PERCENT (10: the cluster's auto-compaction threshold for data files,
#        `/controller/setAutoCompaction`, ADR 0159; "undefined": off), BUCKET_COMPACT_SECONDS (0: the driver never
#        asks a compaction itself; > 0: every that many seconds, as an operator's cron would),
#        PULL_ROUNDS (3), RATE (0: unpaced; operations per second the driver keeps to, so the populations that
#        live for a time window, tombstones and old bodies, hold steady), SEED (71), SETTEE_SERVER_BIN / SETTEE_GATEWAY_BIN / SETTEE_LITE_BIN (.build/release/...),
#        LONGRUN_DIR (a new temporary directory: data, logs, longrun.json), LONGRUN_BASE_PORT (admin ports base,
#        47091; KV base - 5881, views base + 1)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OPS=${OPS:-1000000}
DOCS=${DOCS:-10000}
WORKERS=${WORKERS:-4}
PURGE_DAYS=${PURGE_DAYS:-0.001}
OLD_REV_EXPIRY=${OLD_REV_EXPIRY:-60}
COMPACT_EVERY=${COMPACT_EVERY:-10000}
COMPACTION_PERCENT=${COMPACTION_PERCENT:-10}
BUCKET_COMPACT_SECONDS=${BUCKET_COMPACT_SECONDS:-0}
PULL_ROUNDS=${PULL_ROUNDS:-3}
RATE=${RATE:-0}
SEED=${SEED:-71}
SERVER_BIN=${SETTEE_SERVER_BIN:-$ROOT/.build/release/settee-server}
GATEWAY_BIN=${SETTEE_GATEWAY_BIN:-$ROOT/.build/release/settee-gateway}
LITE_BIN=${SETTEE_LITE_BIN:-$ROOT/.build/release/settee-lite}
for b in "$SERVER_BIN" "$GATEWAY_BIN" "$LITE_BIN"; do
    [ -x "$b" ] || { echo "longrun: $b missing (swift build -c release)" >&2; exit 1; }
done
DIR=${LONGRUN_DIR:-$(mktemp -d /tmp/settee-longrun.XXXXXX)}
mkdir -p "$DIR"
BASE=${LONGRUN_BASE_PORT:-47091}
export SETTEE_CLUSTER_DATA="$DIR/cluster" SETTEE_SERVER_BIN="$SERVER_BIN" SETTEE_GATEWAY_BIN=/nonexistent \
    SETTEE_BASE_ADMIN_PORT=$BASE SETTEE_BASE_KV_PORT=$((BASE - 5881)) SETTEE_BASE_VIEWS_PORT=$((BASE + 1)) \
    SETTEE_BUCKET_RAM_MB=256
source benchmarks/lib.sh
GW_PID=""
cleanup() {
    [ -n "$GW_PID" ] && kill "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null
    cluster/down >/dev/null || true
}
trap cleanup EXIT

echo "longrun: OPS=$OPS DOCS=$DOCS WORKERS=$WORKERS PURGE_DAYS=$PURGE_DAYS OLD_REV_EXPIRY=$OLD_REV_EXPIRY" \
    "COMPACTION_PERCENT=$COMPACTION_PERCENT in $DIR"
cluster/up 3 >"$DIR/cluster-up.log"
ADMIN="http://127.0.0.1:$BASE"
curl -sf -u Administrator:password -d purgeInterval=0.04 "$ADMIN/pools/default/buckets/demo" >/dev/null
curl -sf -u Administrator:password -d "databaseFragmentationThreshold[percentage]=$COMPACTION_PERCENT" \
    "$ADMIN/controller/setAutoCompaction" >/dev/null
for bucket in fresh trees; do
    curl -sf -u Administrator:password -d name=$bucket -d ramQuotaMB=256 -d authType=none -d replicaNumber=1 \
        -d purgeInterval=0.04 "$ADMIN/pools/default/buckets" >/dev/null
    for _ in $(seq 1 600); do
        ready=$(curl -s -u Administrator:password "$ADMIN/pools/default/buckets/$bucket" | python3 -c \
            'import json,sys; b=json.load(sys.stdin); print(all(n.get("status")=="healthy" for n in b["nodes"]) and len(b["nodes"])==3)' \
            2>/dev/null || echo False)
        [ "$ready" = True ] && break
        sleep 0.5
    done
done

GW_PORT=$(free_port)
GW_ADMIN_PORT=$(free_port)
db_config() { # name [meta_purge_interval days]
    cat <<DB
    "$1": {
      "server": "$ADMIN", "bucket": "$1", "username": "Administrator", "password": "password",
      "enable_shared_bucket_access": true, "import_docs": "continuous",
      "revs_limit": 20, "allow_conflicts": true, "meta_purge_interval": ${2:-$PURGE_DAYS},
      "old_rev_expiry_seconds": $OLD_REV_EXPIRY,
      "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]},
                "reader": {"password": "reader-password", "admin_channels": ["*"]}},
      "sync": \`function(doc) {channel(doc.channels);}\`
    }
DB
}
cat >"$DIR/gateway.json" <<GWCONFIG
{
  "interface": "127.0.0.1:$GW_PORT",
  "adminInterface": "127.0.0.1:$GW_ADMIN_PORT",
  "databases": {
$(db_config demo),
$(db_config fresh),
$(db_config trees 30)
  }
}
GWCONFIG
"$GATEWAY_BIN" "$DIR/gateway.json" >>"$DIR/gateway.log" 2>&1 </dev/null &
GW_PID=$!
wait_port "$GW_PORT"
for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$GW_PORT/demo/" >/dev/null && curl -sf "http://127.0.0.1:$GW_PORT/fresh/" >/dev/null \
        && curl -sf "http://127.0.0.1:$GW_PORT/trees/" >/dev/null && break
    sleep 0.5
done

python3 benchmarks/longrun.py --public "http://127.0.0.1:$GW_PORT/demo" --admin "http://127.0.0.1:$GW_ADMIN_PORT/demo" \
    --fresh-public "http://127.0.0.1:$GW_PORT/fresh" --trees-public "http://127.0.0.1:$GW_PORT/trees" \
    --db demo --bucket demo \
    --nodes "$ADMIN,http://127.0.0.1:$((BASE + 10)),http://127.0.0.1:$((BASE + 20))" --lite "$LITE_BIN" \
    --cluster-data "$SETTEE_CLUSTER_DATA" \
    --ops "$OPS" --docs "$DOCS" --workers "$WORKERS" --compact-every "$COMPACT_EVERY" \
    --bucket-compact-seconds "$BUCKET_COMPACT_SECONDS" --pull-rounds "$PULL_ROUNDS" --rate "$RATE" \
    --seed "$SEED" --purge-days "$PURGE_DAYS" --old-rev-expiry "$OLD_REV_EXPIRY" --json "$DIR/longrun.json"
echo "longrun: samples and pulls in $DIR/longrun.json; logs in $DIR"
