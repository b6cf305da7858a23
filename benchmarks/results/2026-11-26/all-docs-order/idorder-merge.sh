#!/usr/bin/env bash
# Times IDOrder's merge (a reader's, outside the index's lock) and install (under it) as a gateway grows to 200,000 and
# 1,000,000 documents with an `_all_docs` reader every 10,000 new ones: the real IDOrder.swift and PartitioningIndex.swift
# compiled with -O beside idorder-merge.swift.txt (a main and a stand-in for Limits). Output: idorder-merge.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed 's/^import SetteeCore//' "$root/Sources/SetteeGateway/Database/IDOrder.swift" >"$work/IDOrder.swift"
cp "$root/Sources/SetteeCore/PartitioningIndex.swift" "$work/"
cp "$here/idorder-merge.swift.txt" "$work/main.swift"
swiftc -O -o "$work/idorder-merge" "$work/main.swift" "$work/IDOrder.swift" "$work/PartitioningIndex.swift"
"$work/idorder-merge"
