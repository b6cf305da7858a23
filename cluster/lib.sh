# Shared by cluster/up and cluster/add (sourced). Ports of node i: base + 10*i.
USER_NAME="${SETTEE_USER:-Administrator}"
PASSWORD="${SETTEE_PASSWORD:-password}"
ADMIN0="${SETTEE_BASE_ADMIN_PORT:-8091}"
KV0="${SETTEE_BASE_KV_PORT:-11210}"
VIEWS0="${SETTEE_BASE_VIEWS_PORT:-8092}"
BIN="${SETTEE_SERVER_BIN:-.build/release/settee-server}"
DATA="${SETTEE_CLUSTER_DATA:-cluster/data}"
ADMIN_URL="http://127.0.0.1:$ADMIN0"
AUTH=(-u "$USER_NAME:$PASSWORD")

wait_port() { # host port seconds
    for _ in $(seq 1 $(( $3 * 10 ))); do
        (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# detach CMD...: runs CMD in the background with none of this shell's descriptors but 0-2 (a daemon that kept,
# say, a CI runner's pipe or the socket through which Foundation's Process watches its child would make the
# caller wait for the daemon instead of for this script). $! is CMD's pid.
detach() {
    (
        for fd in /proc/$BASHPID/fd/*; do
            fd=${fd##*/}
            if [ "$fd" -gt 2 ] && [ "$fd" != 255 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
        done
        exec nohup "$@"
    ) &
}

# start_node i: starts node i unless its pid file names a live process.
start_node() {
    local i=$1 admin=$((ADMIN0 + $1 * 10)) kv=$((KV0 + $1 * 10)) views=$((VIEWS0 + $1 * 10))
    local pidfile="$DATA/n$i.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "node n$i already running (pid $(cat "$pidfile"))"
        return 0
    fi
    for p in $admin $kv $views; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "cluster: port $p is taken by another process; set SETTEE_BASE_*_PORT" >&2; exit 1
        fi
    done
    mkdir -p "$DATA"
    detach "$BIN" --data-dir "$DATA/n$i" --host 127.0.0.1 --admin-port "$admin" --kv-port "$kv" \
        --views-port "$views" --name "n$i@127.0.0.1" >>"$DATA/n$i.log" 2>&1 </dev/null
    echo $! >"$pidfile"
    wait_port 127.0.0.1 "$admin" 300 && wait_port 127.0.0.1 "$kv" 60 || {
        echo "cluster: node n$i did not start; see $DATA/n$i.log" >&2; exit 1; }
    echo "node n$i started: admin $admin, kv $kv, views $views (pid $(cat "$pidfile"))"
}

# is_member i: whether node i is in the cluster n0 leads.
is_member() {
    curl -s "${AUTH[@]}" "$ADMIN_URL/pools/default" | grep -q "\"otpNode\":\"n$1@127.0.0.1\""
}

# add_node i: joins node i to the cluster through n0 (no-op when it is a member already).
add_node() {
    local i=$1
    is_member "$i" && return 0
    curl -sf "${AUTH[@]}" -X POST "$ADMIN_URL/controller/addNode" -d "hostname=127.0.0.1:$((ADMIN0 + i * 10))" \
        -d "user=$USER_NAME" -d "password=$PASSWORD" -d services=kv >/dev/null \
        || { echo "cluster: adding node n$i failed" >&2; exit 1; }
    echo "node n$i added"
}

# rebalance: runs a rebalance over every member and waits for it, drawing a progress bar.
rebalance() {
    local known
    known=$(curl -s "${AUTH[@]}" "$ADMIN_URL/pools/default" | python3 -c \
        'import json,sys; print(",".join(n["otpNode"] for n in json.load(sys.stdin)["nodes"]))')
    curl -sf "${AUTH[@]}" -X POST "$ADMIN_URL/controller/rebalance" -d "knownNodes=$known" -d ejectedNodes= >/dev/null \
        || { echo "cluster: rebalance refused" >&2; exit 1; }
    while true; do
        local p
        p=$(curl -s "${AUTH[@]}" "$ADMIN_URL/pools/default/rebalanceProgress")
        if echo "$p" | grep -q '"status":"none"'; then
            if echo "$p" | grep -q errorMessage; then echo; echo "cluster: $p" >&2; exit 1; fi
            printf '\rrebalance [%-40s] 100%%\n' "########################################"
            break
        fi
        local pct
        pct=$(echo "$p" | python3 -c 'import json,sys; d=json.load(sys.stdin); v=[x["progress"] for k,x in d.items() if isinstance(x,dict)]; print(int(100*(v[0] if v else 0)))')
        printf '\rrebalance [%-40s] %3d%%' "$(printf '#%.0s' $(seq 1 $((pct * 40 / 100))) 2>/dev/null | head -c $((pct * 40 / 100)))" "$pct"
        sleep 0.5
    done
}
