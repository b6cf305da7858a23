#!/usr/bin/env bash
# What one `_changes?include_docs=true` (and `_all_docs?include_docs=true`) answer makes a gateway hold: a gateway on
# a one-node cluster bucket, DOCS documents of SIZE bytes pushed, then each answer read once with curl; the gateway's
# peak RSS (VmHWM) before and after each read. Usage: SETTEE_GATEWAY_BIN=... run.sh [DOCS] [SIZE]
set -euo pipefail
cd "$(dirname "$0")"
source ../../../lib.sh
DOCS=${1:-4000}; SIZE=${2:-20000}
work=$(mktemp -d); trap 'kill $GW_PID $SETTEE_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
start_settee "$work/node"; init_settee 1024
curl -sf -u Administrator:password -X PUT "http://127.0.0.1:$ADMIN_PORT/settings/rbac/users/local/gw" \
    -d password=password -d 'roles=bucket_full_access[bench]' >/dev/null
start_gateway "$work/gw" "http://127.0.0.1:$ADMIN_PORT" bench gw password
python3 - "$GW_PORT" "$DOCS" "$SIZE" <<'PY'
import json, sys, urllib.request
port, docs, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for start in range(0, docs, 500):
    batch = [{"_id": "d%06d" % i, "channels": ["x"], "pad": "x" * size} for i in range(start, min(docs, start + 500))]
    req = urllib.request.Request("http://127.0.0.1:%d/db/_bulk_docs" % port, json.dumps({"docs": batch}).encode(),
                                 {"Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
PY
hwm() { awk '/VmHWM/ {print $2}' "/proc/$GW_PID/status"; }
echo "docs=$DOCS size=$SIZE gateway=$GW_BIN"
echo "after push: VmRSS $(rss_kb $GW_PID) kB, VmHWM $(hwm) kB"
for path in "_changes?include_docs=true" "_all_docs?include_docs=true" "_changes?include_docs=true gzip"; do
    before=$(hwm); t0=$(date +%s%N)
    if [ "${path#* }" = gzip ]; then
        bytes=$(curl -sf -H 'Accept-Encoding: gzip' "http://127.0.0.1:$GW_PORT/db/${path% *}" | wc -c)
    else
        bytes=$(curl -sf "http://127.0.0.1:$GW_PORT/db/$path" | wc -c)
    fi
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "$path: $bytes bytes in $ms ms; VmHWM $before -> $(hwm) kB (+$(( $(hwm) - before )) kB); VmRSS $(rss_kb $GW_PID) kB"
done
