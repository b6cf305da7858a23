# Shared helpers for the benchmark scripts (sourced). Everything runs on 127.0.0.1 only.
BIN="${SETTEE_SERVER_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.build/release/settee-server}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 1 6000); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# start_settee DATA_DIR -> sets SETTEE_PID ADMIN_PORT KV_PORT
start_settee() {
    ADMIN_PORT=${ADMIN_PORT:-$(free_port)}; KV_PORT=${KV_PORT:-$(free_port)}; VIEWS_PORT=${VIEWS_PORT:-$(free_port)}
    "$BIN" --data-dir "$1" --admin-port "$ADMIN_PORT" --kv-port "$KV_PORT" --views-port "$VIEWS_PORT" \
        --log-level warning ${KV_THREADS:+--kv-threads $KV_THREADS} >>"$1.log" 2>&1 &
    SETTEE_PID=$!
    wait_port "$ADMIN_PORT" && wait_port "$KV_PORT"
}
init_settee() { # quotaMB
    curl -sf -X POST "http://127.0.0.1:$ADMIN_PORT/settings/web" -d username=Administrator -d password=password -d port=SAME >/dev/null
    curl -sf -u Administrator:password -d name=bench -d "ramQuotaMB=$1" -d authType=none -d flushEnabled=1 \
        -d replicaNumber=0 "http://127.0.0.1:$ADMIN_PORT/pools/default/buckets" >/dev/null
    sleep 0.5
}
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
GW_BIN="${SETTEE_GATEWAY_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.build/release/settee-gateway}"
# start_gateway FILE_PREFIX SERVER [BUCKET USER PASSWORD] -> sets GW_PID GW_PORT GW_ADMIN_PORT. One database `db`
# (GUEST on `*`, sync function channel(doc.channels)) on SERVER (`walrus:` or http://127.0.0.1:ADMIN_PORT);
# config FILE_PREFIX.json, log FILE_PREFIX.log.
start_gateway() {
    GW_PORT=$(free_port); GW_ADMIN_PORT=$(free_port)
    local extra=""
    [ -n "${3:-}" ] && extra="\"bucket\": \"$3\", \"username\": \"$4\", \"password\": \"$5\","
    cat >"$1.json" <<GWCONFIG
{
  "interface": "127.0.0.1:$GW_PORT",
  "adminInterface": "127.0.0.1:$GW_ADMIN_PORT",
  "databases": {
    "db": {
      "server": "$2", $extra
      "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}},
      "sync": \`function(doc) {channel(doc.channels);}\`
    }
  }
}
GWCONFIG
    "$GW_BIN" "$1.json" --log-level warning >>"$1.log" 2>&1 &
    GW_PID=$!
    wait_port "$GW_PORT" && wait_port "$GW_ADMIN_PORT"
}
