#!/usr/bin/env bash
# Creates .build-py/venv with the official Couchbase Python SDK (couchbase==4.6.3) for the SDK process
# tests (Tests/ProcessTests/sdk/). Idempotent: does nothing when the right version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.build-py/venv
SDK_VERSION=4.6.3
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import couchbase, sys; sys.exit(0 if couchbase.__version__.startswith('$SDK_VERSION') else 1)" 2>/dev/null; then
    exit 0
fi
PY=${PYTHON:-python3}
if ! "$PY" -m venv --help >/dev/null 2>&1; then
    echo "python3 venv module missing" >&2
    exit 1
fi
mkdir -p .build-py
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "couchbase==$SDK_VERSION"
