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
