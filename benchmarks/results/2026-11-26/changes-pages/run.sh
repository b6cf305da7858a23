#!/usr/bin/env bash
# What one `_changes` answer without bodies makes a gateway hold, and what it does to writes meanwhile: a gateway on a
# one-node cluster bucket, DOCS small documents pushed, then (1) one normal `_changes` read with curl, (2) four read at
# once, (3) a continuous feed that ends (timeout=1), (3a) one `_all_docs` — the gateway's peak RSS (VmHWM) before and after each, and the
# time; (4) PUT latency of one writer, alone and while readers loop over `_changes`, then over `_all_docs` (`probe.py`).
# Usage: SETTEE_GATEWAY_BIN=... SETTEE_SERVER_BIN=... run.sh [DOCS]
set -euo pipefail
cd "$(dirname "$0")"
source ../../../lib.sh
DOCS=${1:-200000}
work=$(mktemp -d); trap 'kill $GW_PID $SETTEE_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
start_settee "$work/node"; init_settee 1024
curl -sf -u Administrator:password -X PUT "http://127.0.0.1:$ADMIN_PORT/settings/rbac/users/local/gw" \
    -d password=password -d 'roles=bucket_full_access[bench]' >/dev/null
start_gateway "$work/gw" "http://127.0.0.1:$ADMIN_PORT" bench gw password
python3 - "$GW_PORT" "$DOCS" <<'PY'
import json, sys, urllib.request
port, docs = int(sys.argv[1]), int(sys.argv[2])
for start in range(0, docs, 1000):
    batch = [{"_id": "d%07d" % i, "channels": ["x"], "n": i} for i in range(start, min(docs, start + 1000))]
    req = urllib.request.Request("http://127.0.0.1:%d/db/_bulk_docs" % port, json.dumps({"docs": batch}).encode(),
                                 {"Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
PY
sleep 3
hwm() { awk '/VmHWM/ {print $2}' "/proc/$GW_PID/status"; }
echo "docs=$DOCS gateway=$GW_BIN"
echo "after push: VmRSS $(rss_kb $GW_PID) kB, VmHWM $(hwm) kB"
url="http://127.0.0.1:$GW_PORT/db"
before=$(hwm); t0=$(date +%s%N)
bytes=$(curl -sf "$url/_changes" | wc -c)
echo "_changes: $bytes bytes in $(( ($(date +%s%N) - t0) / 1000000 )) ms; VmHWM +$(( $(hwm) - before )) kB"
before=$(hwm); t0=$(date +%s%N)
pids=(); for i in 1 2 3 4; do curl -sf "$url/_changes" -o /dev/null & pids+=($!); done; wait "${pids[@]}"
echo "4 x _changes at once: $(( ($(date +%s%N) - t0) / 1000000 )) ms; VmHWM +$(( $(hwm) - before )) kB"
before=$(hwm); t0=$(date +%s%N)
lines=$(curl -sf "$url/_changes?feed=continuous&timeout=1" | grep -c seq || true)
echo "continuous (timeout=1): $lines lines in $(( ($(date +%s%N) - t0) / 1000000 )) ms; VmHWM +$(( $(hwm) - before )) kB"
before=$(hwm); t0=$(date +%s%N)
bytes=$(curl -sf "$url/_all_docs" | wc -c)
echo "_all_docs: $bytes bytes in $(( ($(date +%s%N) - t0) / 1000000 )) ms; VmHWM +$(( $(hwm) - before )) kB"
python3 probe.py "$GW_PORT"
python3 probe.py "$GW_PORT" /db/_all_docs
echo "end: VmRSS $(rss_kb $GW_PID) kB, VmHWM $(hwm) kB"
