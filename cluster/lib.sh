# Shared by cluster/up and cluster/add (sourced). Ports of node i: base + 10*i.
USER_NAME="${SETTEE_USER:-Administrator}"
PASSWORD="${SETTEE_PASSWORD:-password}"
ADMIN0="${SETTEE_BASE_ADMIN_PORT:-8091}"
KV0="${SETTEE_BASE_KV_PORT:-11210}"
VIEWS0="${SETTEE_BASE_VIEWS_PORT:-8092}"
BIN="${SETTEE_SERVER_BIN:-.build/release/settee-server}"
DATA="${SETTEE_CLUSTER_DATA:-cluster/data}"
# SETTEE_TLS=1: every node also serves TLS (--tls: a self-signed certificate kept in its data dir) on the KV, admin
# and views TLS ports (bases 11207, 18091, 18092, + 10*i); the scripts then talk to the cluster over HTTPS, trusting
# $DATA/ca-bundle.pem (every node's certificate), and join nodes by https:// pinned to their fingerprints.
# SETTEE_TLS=only: the same with --tls-only (no plain KV, admin or views port).
TLS="${SETTEE_TLS:-}"
KVTLS0="${SETTEE_BASE_KV_TLS_PORT:-11207}"
ADMINTLS0="${SETTEE_BASE_ADMIN_TLS_PORT:-18091}"
VIEWSTLS0="${SETTEE_BASE_VIEWS_TLS_PORT:-18092}"
BUNDLE="$DATA/ca-bundle.pem"
CACERT=()
if [ -n "$TLS" ]; then
    ADMIN_URL="https://127.0.0.1:$ADMINTLS0"
    CACERT=(--cacert "$BUNDLE")
else
    ADMIN_URL="http://127.0.0.1:$ADMIN0"
fi
AUTH=(-u "$USER_NAME:$PASSWORD" "${CACERT[@]}")

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
    local admintls=$((ADMINTLS0 + $1 * 10)) kvtls=$((KVTLS0 + $1 * 10)) viewstls=$((VIEWSTLS0 + $1 * 10))
    local pidfile="$DATA/n$i.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "node n$i already running (pid $(cat "$pidfile"))"
        return 0
    fi
    local ports=("$admin" "$kv" "$views") tls_args=() ready=("$admin" "$kv")
    if [ -n "$TLS" ]; then
        ports+=("$admintls" "$kvtls" "$viewstls")
        tls_args=(--tls --kv-tls-port "$kvtls" --admin-tls-port "$admintls" --views-tls-port "$viewstls")
        ready=("$admintls" "$kvtls")
        [ "$TLS" = only ] && tls_args+=(--tls-only)
    fi
    for p in "${ports[@]}"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "cluster: port $p is taken by another process; set SETTEE_BASE_*_PORT" >&2; exit 1
        fi
    done
    mkdir -p "$DATA"
    detach "$BIN" --data-dir "$DATA/n$i" --host 127.0.0.1 --admin-port "$admin" --kv-port "$kv" \
        --views-port "$views" --name "n$i@127.0.0.1" "${tls_args[@]}" >>"$DATA/n$i.log" 2>&1 </dev/null
    echo $! >"$pidfile"
    wait_port 127.0.0.1 "${ready[0]}" 300 && wait_port 127.0.0.1 "${ready[1]}" 60 || {
        echo "cluster: node n$i did not start; see $DATA/n$i.log" >&2; exit 1; }
    if [ -n "$TLS" ]; then
        # Every node's self-signed certificate, for curl --cacert, the gateway's cacertpath and settee --cacert.
        cat "$DATA"/n*/tls/cert.pem >"$BUNDLE"
        echo "node n$i started: admin $admin (TLS $admintls), kv $kv (TLS $kvtls), views $views (TLS $viewstls)" \
            "(pid $(cat "$pidfile"))"
    else
        echo "node n$i started: admin $admin, kv $kv, views $views (pid $(cat "$pidfile"))"
    fi
}

# fingerprint i: sha256 fingerprint of node i's certificate (openssl's colon form, which addNode accepts).
fingerprint() {
    openssl x509 -in "$DATA/n$1/tls/cert.pem" -noout -fingerprint -sha256 | sed 's/^.*=/sha256:/'
}

# is_member i: whether node i is in the cluster n0 leads.
is_member() {
    curl -s "${AUTH[@]}" "$ADMIN_URL/pools/default" | grep -q "\"otpNode\":\"n$1@127.0.0.1\""
}

# add_node i: joins node i to the cluster through n0 (no-op when it is a member already).
add_node() {
    local i=$1
    is_member "$i" && return 0
    local target=(-d "hostname=127.0.0.1:$((ADMIN0 + i * 10))")
    if [ -n "$TLS" ]; then
        # Over HTTPS pinned to the node's certificate: the cluster document never crosses in clear (ADR 0030).
        target=(-d "hostname=https://127.0.0.1:$((ADMINTLS0 + i * 10))" -d "tlsFingerprint=$(fingerprint "$i")")
    fi
    curl -sf "${AUTH[@]}" -X POST "$ADMIN_URL/controller/addNode" "${target[@]}" \
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
