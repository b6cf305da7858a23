#!/usr/bin/env bash
# HTTP Basic requests a second as the full admin and as local users (ro_admin; data_reader of the bucket), on the
# admin port (GET /pools/default) and the views port (GET /bench/_design/d/_view/v?limit=1), CONNS keep-alive
# connections for SECONDS each, one node on 127.0.0.1. Each request's Basic credentials are checked by the node;
# the first success per user runs PBKDF2 (4,096 rounds), the rest what the node keeps of a verified login.
#   benchmarks/basic-auth-requests.sh          (release build: make release; or SETTEE_SERVER_BIN)
#   CONNS=8 SECONDS_EACH=5 benchmarks/basic-auth-requests.sh
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
CONNS=${CONNS:-8}; SECONDS_EACH=${SECONDS_EACH:-5}
[ -x "$BIN" ] || { echo "basic-auth-requests: $BIN missing (make release)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'kill $SETTEE_PID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
start_settee "$WORK/node"
init_settee 256
A="-sf -u Administrator:password"
curl $A -X PUT "http://127.0.0.1:$ADMIN_PORT/settings/rbac/users/local/ro" -d password=ro-password -d roles=ro_admin >/dev/null
curl $A -X PUT "http://127.0.0.1:$ADMIN_PORT/settings/rbac/users/local/reader" -d password=reader-password \
    -d 'roles=data_reader[bench]' >/dev/null
curl $A -X PUT -H 'Content-Type: application/json' "http://127.0.0.1:$VIEWS_PORT/bench/_design/d" \
    -d '{"views":{"v":{"map":"function(doc, meta) { emit(meta.id, null); }"}}}' >/dev/null
echo "binary $BIN; load average $(cut -d' ' -f1-3 /proc/loadavg); $CONNS connections, $SECONDS_EACH s per row"
python3 - "$ADMIN_PORT" "$VIEWS_PORT" "$CONNS" "$SECONDS_EACH" <<'PY'
import base64, http.client, sys, threading, time
admin, views, conns, seconds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def run(port, path, user, password):
    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    counts, bad = [0] * conns, [0] * conns
    deadline = time.monotonic() + seconds
    def worker(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < deadline:
            c.request("GET", path, headers={"Authorization": auth})
            r = c.getresponse(); r.read()
            if r.status == 200: counts[i] += 1
            else: bad[i] += 1
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(conns)]
    start = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    elapsed = time.monotonic() - start
    return sum(counts) / elapsed, sum(bad)
rows = [("admin port, GET /pools/default", admin, "/pools/default"),
        ("views port, view query limit=1", views, "/bench/_design/d/_view/v?limit=1&stale=ok")]
for label, port, path in rows:
    for user, pw in [("Administrator", "password"), ("ro", "ro-password"), ("reader", "reader-password")]:
        if port == admin and user == "reader": continue
        if port == views and user == "ro": continue
        rate, bad = run(port, path, user, pw)
        print(f"{label:34} as {user:13} {rate:10,.0f} req/s  (non-200: {bad})")
PY
