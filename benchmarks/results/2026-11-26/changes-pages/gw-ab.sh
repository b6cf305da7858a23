#!/usr/bin/env bash
# Two gateways on walrus: side by side, OLD_BIN and NEW_BIN (release settee-gateway builds), one
# `settee-bench gateway` run of PHASES for ROUNDS alternated rounds, then `page-walk.py` (a client paging through
# `_changes?style=all_docs&limit=200`, 6 alternated walks per gateway).
# Usage: OLD_BIN=... NEW_BIN=... gw-ab.sh PHASES ROUNDS   (e.g. push,pull 5; needs benchmarks/.build/release/settee-bench)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source lib.sh
work=$(mktemp -d)
GW_BIN=$OLD_BIN; start_gateway "$work/old" "walrus:"; OLD=$GW_PID; OP=$GW_PORT; OA=$GW_ADMIN_PORT
GW_BIN=$NEW_BIN; start_gateway "$work/new" "walrus:"; NEW=$GW_PID; NP=$GW_PORT; NA=$GW_ADMIN_PORT
trap 'kill $OLD $NEW 2>/dev/null; rm -rf "$work"' EXIT
.build/release/settee-bench gateway --url old@http://127.0.0.1:$OP/db --admin-url http://127.0.0.1:$OA/db \
  --url new@http://127.0.0.1:$NP/db --admin-url http://127.0.0.1:$NA/db \
  --phase "$1" --docs 10000 --doc-size 1024 --batch 200 --connections 4 --clients 1000 --rounds "$2" --quiet
python3 "$here/page-walk.py" "$OP" "$NP"
