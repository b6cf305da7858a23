#!/usr/bin/env bash
# Installs the Debian packages Settee needs, only those missing (idempotent, quiet when all present).
set -euo pipefail
missing=()
for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing missing packages: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The memcached package starts a system daemon on 11211; we run our own instances when needed.
if printf '%s\n' "${missing[@]}" | grep -qx memcached; then
    (command -v systemctl >/dev/null && $SUDO systemctl stop memcached 2>/dev/null) || true
    $SUDO pkill -x memcached 2>/dev/null || true
fi
