#!/usr/bin/env bash
# `_all_docs` with and without the index's id order (ADR 0093): two release gateways on walrus: side by side
# (OLD_BIN, NEW_BIN), each filled with DOCS small documents through _bulk_docs (1,000 per request), then alternated
# rounds on each: 20 x `_all_docs?limit=10`, 20 x `_all_docs?limit=10` while a writer PUTs new documents
# (ids added since the last merge), 3 x the whole `_all_docs`, 20 x `startkey`/`endkey` ranges of ~100 rows.
# Usage: OLD_BIN=... NEW_BIN=... run.sh [DOCS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
source lib.sh
work=$(mktemp -d)
GW_BIN=$OLD_BIN; start_gateway "$work/old" "walrus:"; OLD=$GW_PID; OP=$GW_PORT
GW_BIN=$NEW_BIN; start_gateway "$work/new" "walrus:"; NEW=$GW_PID; NP=$GW_PORT
trap 'kill $OLD $NEW 2>/dev/null; rm -rf "$work"' EXIT
python3 "$here/all_docs_timing.py" "${1:-200000}" "old=$OP" "new=$NP"
