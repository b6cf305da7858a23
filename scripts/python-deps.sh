#!/usr/bin/env bash
# One virtual environment for the Python-driven tests, .build-py/venv (git-ignored): the official Couchbase
# Python SDK (couchbase==4.6.3, Tests/ProcessTests/sdk/) and selenium for the console's browser tests
# (Tests/ProcessTests/console/; Chromium and chromedriver come from Debian, see APT_PACKAGES), and pythonblip, an
# independent BLIP 3 client the BLIP tests exchange frames with (it needs websockets<14: newer versions renamed the
# header argument it passes). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.build-py/venv
SDK_VERSION=4.6.3
BLIP_VERSION=0.3.1
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import couchbase, selenium, pythonblip.frame, websockets, sys
from importlib.metadata import version
sys.exit(0 if couchbase.__version__.startswith('$SDK_VERSION') and version('pythonblip') == '$BLIP_VERSION' else 1)" 2>/dev/null; then
    exit 0
fi
PY=${PYTHON:-python3}
"$PY" -m venv --help >/dev/null 2>&1 || { echo "python-deps: the python3 venv module is missing" >&2; exit 1; }
mkdir -p .build-py
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "couchbase==$SDK_VERSION" 'selenium>=4.20,<5' \
    "pythonblip==$BLIP_VERSION" 'websockets<14'
