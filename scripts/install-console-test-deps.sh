#!/usr/bin/env bash
# Python selenium for the console browser tests, in a venv under .build-py/ (git-ignored). Idempotent.
# Chromium and chromedriver come from Debian (APT_PACKAGES in the Makefile).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.build-py
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then exit 0; fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check 'selenium>=4.20,<5'
