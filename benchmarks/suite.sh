#!/usr/bin/env bash
# The standard suite (benchmarks/suite.json): starts memcached, redis-server (appendonly yes, appendfsync
# everysec; a second one with appendfsync always), one settee node and settee clusters of 1 and 3 nodes on loopback, runs every workload as a
# `settee-bench compare` (alternating rounds, ratios against the first target), then the gateway workloads
# (`settee-bench gateway` against a settee-gateway on walrus: and one on cluster1's bucket `gateway`), then writes
# results/<date>/suite/report.html and report.json. Between them: the view index build on the node, a rebalance
# under load on cluster3, a warmup of 1,000,000 items on a node of its own and backup/restore of 1,000,000 items on
# another. Needs release builds of settee-server, settee-gateway, settee (the CLI, SETTEE_CLI_BIN) and settee-bench
# (without settee-gateway the gateway workloads are skipped).
#   benchmarks/suite.sh                 env: ROUNDS (suite's), DURATION (override every workload's), ONLY=name,name,
#                                            GW_ROUNDS (override the gateway workloads' rounds), OUT (results directory)
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
ROOT=$(cd .. && pwd)
BENCH=".build/release/settee-bench"
[ -x "$BENCH" ] || { echo "suite: $BENCH missing (make bench builds it)" >&2; exit 1; }
# The load generator's runs (compare, the rebalance's load, gateway) get a fixed glibc trim threshold. glibc trims the
# top of a heap whenever its free space passes a threshold that moves with the allocation pattern, and the smart-client
# target's allocations on one thread and frees on another made the generator itself slow down in waves: 5-9 s of
# every 45 s at about 60% of its rate (ADR 0106). The servers, and the Lite and view builds that run inside settee-bench
# (what those rows measure), keep glibc's defaults.
LOADGEN=(env GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456 "$BENCH")
OUT="${OUT:-results/$(date +%Y-%m-%d)/suite}"; mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for d in c1 c3; do SETTEE_CLUSTER_DATA="$WORK/$d" "$ROOT/cluster/down" >/dev/null 2>&1 || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

MC_PORT=$(free_port); memcached -u "$(id -un)" -l 127.0.0.1 -p "$MC_PORT" -U 0 -t 2 -m 4096 & PIDS+=($!)
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes --appendfsync everysec \
    --save "" --daemonize no --logfile "$WORK/redis.log" & PIDS+=($!)
# A second redis that fsyncs its append-only file before every reply (the durable-vs-redis-always workload).
REDIS_ALWAYS_PORT=$(free_port); mkdir -p "$WORK/redis-always"
redis-server --port "$REDIS_ALWAYS_PORT" --bind 127.0.0.1 --dir "$WORK/redis-always" --appendonly yes \
    --appendfsync always --save "" --daemonize no --logfile "$WORK/redis-always.log" & PIDS+=($!)
start_settee "$WORK/node"; PIDS+=("$SETTEE_PID"); init_settee 4096
NODE_KV=$KV_PORT; NODE_ADMIN=$ADMIN_PORT; NODE_VIEWS=$VIEWS_PORT
# Clusters through cluster/up, on their own base ports and data directories. Bucket `demo` gets 1,024 MB, so the
# workloads' 100,000 x 1 KiB keys stay resident as on the node target (cluster/up's 100 MB held about 70% of them:
# the cluster rows measured evictions and disk fetches, in rounds that came and went; stop 52).
cluster() { # name nodes base
    (cd "$ROOT" && SETTEE_BUCKET_RAM_MB=1024 SETTEE_CLUSTER_DATA="$WORK/$1" SETTEE_SERVER_BIN="${SETTEE_SERVER_BIN:-$ROOT/.build/release/settee-server}" \
        SETTEE_GATEWAY_BIN=/nonexistent SETTEE_BASE_ADMIN_PORT=$3 SETTEE_BASE_KV_PORT=$(($3 + 1000)) SETTEE_BASE_VIEWS_PORT=$(($3 + 1)) \
        cluster/up "$2" >"$WORK/$1.up.log" 2>&1) || { echo "suite: cluster $1 did not start (see $WORK/$1.up.log)" >&2; exit 1; }
}
C1=$(( 30000 + RANDOM % 5000 )); C3=$(( C1 + 200 ))
cluster c1 1 "$C1"; cluster c3 3 "$C3"
# Scope `bench`, collection `kv` in cluster1's bucket (the collection-90-10 workload's cluster1-named target).
curl -sf -u Administrator:password -X POST -d name=bench "http://127.0.0.1:$C1/pools/default/buckets/demo/scopes" >/dev/null
curl -sf -u Administrator:password -X POST -d name=kv \
    "http://127.0.0.1:$C1/pools/default/buckets/demo/scopes/bench/collections" >/dev/null
wait_port "$MC_PORT"; wait_port "$REDIS_PORT"; wait_port "$REDIS_ALWAYS_PORT"

spec() {
    case "$1" in
        memcached) echo "memcached@memcached-binary=127.0.0.1:$MC_PORT" ;;
        redis) echo "redis@redis=127.0.0.1:$REDIS_PORT" ;;
        redis-always) echo "redis-always@redis=127.0.0.1:$REDIS_ALWAYS_PORT" ;;
        cluster1-kv) echo "cluster1-kv@memcached-binary=127.0.0.1:$((C1 + 1000))" ;;
        node) echo "node@memcached-binary=127.0.0.1:$NODE_KV" ;;
        cluster1) echo "cluster1@settee=127.0.0.1:$C1" ;;
        cluster1-c0) echo "cluster1-c0@settee=127.0.0.1:$C1,collection=_default._default" ;;
        cluster1-named) echo "cluster1-named@settee=127.0.0.1:$C1,collection=bench.kv" ;;
        cluster1-durable) echo "cluster1-durable@settee=127.0.0.1:$C1,durability=persistToMajority" ;;
        cluster3) echo "cluster3@settee=127.0.0.1:$C3" ;;
        cluster3-majority) echo "cluster3-majority@settee=127.0.0.1:$C3,durability=majority" ;;
        *) echo "suite: unknown target $1" >&2; exit 1 ;;
    esac
}
ROUNDS=${ROUNDS:-$(python3 -c 'import json; print(json.load(open("suite.json"))["rounds"])')}
python3 -c 'import json
for w in json.load(open("suite.json"))["workloads"]:
    print(w["name"], w["mix"], w["valueSize"], w["keys"], w["connections"], w["depth"], w["duration"].replace(" ", "_"),
          w.get("ops", 0), w.get("rounds", 0), int(w.get("preload", True)), ",".join(w["targets"]))' |
while read -r name mix vsize keys conns depth duration ops wrounds preload targets; do
    if [ -n "${ONLY:-}" ] && ! echo ",$ONLY," | grep -q ",$name,"; then continue; fi
    args=()
    for t in ${targets//,/ }; do args+=(--target "$(spec "$t")"); done
    # A fixed number of operations per round (ops), or the workload's duration.
    if [ "$ops" -gt 0 ]; then args+=(--ops "$ops"); else args+=(--duration "${DURATION:-$duration}"); fi
    [ "$preload" -eq 0 ] && args+=(--no-preload)
    [ "$wrounds" -gt 0 ] || wrounds=$ROUNDS
    echo "== $name"
    "${LOADGEN[@]}" compare "${args[@]}" --mix "$mix" --value-size "$vsize" --keys "$keys" --connections "$conns" \
        --depth "$depth" --rounds "$wrounds" --quiet --json "$OUT/$name.json" | tee "$OUT/$name.txt"
    if [ "$ops" -gt 0 ]; then # the wall time of each target's operations (median round)
        python3 -c 'import json,sys
n = int(sys.argv[2])
for s in json.load(open(sys.argv[1]))["summary"]:
    t, rate = s["target"], max(s["medianOpsPerSecond"], 1e-9)
    print(f"{t}: {n:,} ops in {n / rate:.1f} s wall time")' \
            "$OUT/$name.json" "$ops" | tee -a "$OUT/$name.txt"
    fi
done

# View index build (suite.json → views): on the node target's bucket, which the KV workloads filled. The time of
# one stale=false query after the design document's PUT is the whole build; the _count it returns must equal the
# bucket's item count, or the figure is not reported.
python3 -c 'import json
for v in json.load(open("suite.json")).get("views", []):
    if not v.get("inProcess"): print(json.dumps(v))' | while read -r view; do
    name=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["name"])' "$view")
    if [ -n "${ONLY:-}" ] && ! echo ",$ONLY," | grep -q ",$name,"; then continue; fi
    echo "== $name"
    items=$(curl -sf -u Administrator:password "http://127.0.0.1:$NODE_ADMIN/pools/default/buckets/bench" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["basicStats"]["itemCount"])')
    if [ "$items" -eq 0 ]; then echo "$name: the node's bucket is empty (run it with the KV workloads); skipped"; continue; fi
    python3 -c 'import json,sys; v=json.loads(sys.argv[1])
print(json.dumps({"views": {"v": {"map": v["map"], "reduce": v["reduce"]}}}))' "$view" >"$WORK/ddoc.json"
    curl -sf -u Administrator:password -X PUT -H 'Content-Type: application/json' --data-binary "@$WORK/ddoc.json" \
        "http://127.0.0.1:$NODE_VIEWS/bench/_design/$name" >/dev/null
    start=$(date +%s.%N)
    curl -sf -u Administrator:password "http://127.0.0.1:$NODE_VIEWS/bench/_design/$name/_view/v?stale=false" \
        -o "$WORK/view.json"
    end=$(date +%s.%N)
    python3 - "$WORK/view.json" "$items" "$start" "$end" "$OUT/$name.json" "$name" <<'PY' | tee "$OUT/$name.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
counted = rows[0]["value"] if rows else 0
items, seconds = int(sys.argv[2]), float(sys.argv[4]) - float(sys.argv[3])
if counted != items:
    print(f"{sys.argv[6]}: the view counted {counted} documents, the bucket holds {items}; no figure")
    sys.exit(0)
result = {"name": sys.argv[6], "documents": items, "seconds": seconds, "docsPerSecond": items / seconds}
json.dump(result, open(sys.argv[5], "w"), indent=2)
print(f"{sys.argv[6]}: {items} documents indexed in {seconds:.2f} s = {items / seconds:,.0f} docs/s")
PY
done

# Rebalance under load (suite.json → rebalance): on cluster3, whose bucket the KV workloads filled. The smart client
# keeps a steady load while node n3 is added and rebalanced in (cluster/add), then rebalanced out again; the load's
# per-second timeline against the median of the seconds before the first rebalance is the result.
python3 -c 'import json
for r in json.load(open("suite.json")).get("rebalance", []):
    print(r["name"], r["mix"], r["valueSize"], r["keys"], r["connections"], r["depth"], r["before"], r["between"], r["after"])' |
while read -r name mix vsize keys conns depth before between after; do
    if [ -n "${ONLY:-}" ] && ! echo ",$ONLY," | grep -q ",$name,"; then continue; fi
    echo "== $name"
    C3ENV=(SETTEE_CLUSTER_DATA="$WORK/c3" SETTEE_SERVER_BIN="${SETTEE_SERVER_BIN:-$ROOT/.build/release/settee-server}"
        SETTEE_BASE_ADMIN_PORT=$C3 SETTEE_BASE_KV_PORT=$((C3 + 1000)) SETTEE_BASE_VIEWS_PORT=$((C3 + 1)))
    now() { date +%s.%N; }
    "${LOADGEN[@]}" run --target "settee=127.0.0.1:$C3" --mix "$mix" --value-size "$vsize" --keys "$keys" \
        --connections "$conns" --depth "$depth" --duration 600s --warmup 0s --no-preload --quiet \
        --json "$WORK/$name.load.json" >/dev/null 2>"$WORK/$name.load.err" &
    load=$!
    t_load=$(now)
    sleep "$before"
    t_in0=$(now)
    (cd "$ROOT" && env "${C3ENV[@]}" cluster/add 1 >"$WORK/$name.add.log" 2>&1) ||
        { echo "$name: adding n3 failed (see $WORK/$name.add.log)" >&2; kill -INT "$load"; wait "$load" || true; continue; }
    t_in1=$(now)
    sleep "$between"
    t_out0=$(now)
    known=$(curl -sf -u Administrator:password "http://127.0.0.1:$C3/pools/default" |
        python3 -c 'import json,sys; print(",".join(n["otpNode"] for n in json.load(sys.stdin)["nodes"]))')
    curl -sf -u Administrator:password -X POST "http://127.0.0.1:$C3/controller/rebalance" \
        -d "knownNodes=$known" -d "ejectedNodes=n3@127.0.0.1" >/dev/null
    until curl -sf -u Administrator:password "http://127.0.0.1:$C3/pools/default/rebalanceProgress" |
        grep -q '"status":"none"'; do sleep 0.2; done
    t_out1=$(now)
    sleep "$after"
    kill -INT "$load" 2>/dev/null || true
    wait "$load" 2>/dev/null || true
    kill "$(cat "$WORK/c3/n3.pid")" 2>/dev/null || true
    python3 - "$WORK/$name.load.json" "$OUT/$name.json" "$name" "$t_load" "$t_in0" "$t_in1" "$t_out0" "$t_out1" \
        <<'PY' | tee "$OUT/$name.txt"
import json, statistics, sys
src, dst, name = sys.argv[1], sys.argv[2], sys.argv[3]
t_load, t_in0, t_in1, t_out0, t_out1 = (float(x) for x in sys.argv[4:9])
run = json.load(open(src))[0]
timeline = run.get("timeline") or []
def window(a, b):  # whole seconds of the timeline overlapping [a, b] (seconds since the load started)
    return timeline[int(a - t_load):int(b - t_load) + 1]
before = timeline[1:int(t_in0 - t_load)]  # second 0 holds connection setup
base = statistics.median(before) if before else 0
events = []
for label, a, b in (("rebalance in (3 → 4 nodes)", t_in0, t_in1), ("rebalance out (4 → 3 nodes)", t_out0, t_out1)):
    during = window(a, b)
    events.append({"label": label, "startSecond": a - t_load, "endSecond": b - t_load, "seconds": b - a,
                   "medianOpsPerSecond": statistics.median(during) if during else 0,
                   "minOpsPerSecond": min(during) if during else 0})
errors = run.get("errors", {})
out = {"name": name, "baselineOpsPerSecond": base, "timeline": timeline, "events": events,
       "errors": sum(errors.values()) if isinstance(errors, dict) else errors,
       "errorsByKind": errors if isinstance(errors, dict) else {}}
json.dump(out, open(dst, "w"), indent=2)
print(f"{name}: steady load median {base:,.0f} ops/s before the first rebalance")
for e in events:
    ratio = (lambda v: f"{v / base:.2f} ×" if base else "-")
    print(f"  {e['label']}: {e['seconds']:.1f} s; during it median {e['medianOpsPerSecond']:,.0f} ops/s "
          f"({ratio(e['medianOpsPerSecond'])}), lowest second {e['minOpsPerSecond']:,.0f} ({ratio(e['minOpsPerSecond'])})")
print(f"  errors over the whole run: {out['errors']} {out['errorsByKind'] or ''}")
PY
done

# Warmup (suite.json → warmup): a node of its own loads ITEMS documents, persists them, is killed with -9 and
# restarted; warmup-and-memory.sh times the restart and measures RAM and disk per item.
python3 -c 'import json
for w in json.load(open("suite.json")).get("warmup", []):
    print(w["name"], w["items"], w["valueSize"])' |
while read -r name items vsize; do
    if [ -n "${ONLY:-}" ] && ! echo ",$ONLY," | grep -q ",$name,"; then continue; fi
    echo "== $name"
    JSON="$OUT/$name.json" ITEMS=$items VALUE_SIZE=$vsize NAME=$name OUT="$WORK" ./warmup-and-memory.sh |
        tee "$OUT/$name.txt"
done

# Backup and restore (suite.json → backupRestore, issue 72): a node of its own loads ITEMS documents; backup-restore.sh
# times `settee backup`, `verify` and `restore` against `tar` of the same node's data directory.
python3 -c 'import json
for w in json.load(open("suite.json")).get("backupRestore", []):
    print(w["name"], w["items"], w["valueSize"])' |
while read -r name items vsize; do
    if [ -n "${ONLY:-}" ] && ! echo ",$ONLY," | grep -q ",$name,"; then continue; fi
    echo "== $name"
    JSON="$OUT/$name.json" ITEMS=$items VALUE_SIZE=$vsize NAME=$name OUT="$WORK" ./backup-restore.sh | tee "$OUT/$name.txt"
done

# Gateway workloads: a settee-gateway on walrus: and one on cluster1's bucket `gateway` (RemoteBucket).
gateway_spec() {
    case "$1" in
        gw-walrus) echo "--url gw-walrus@http://127.0.0.1:$GWW_PORT/db --admin-url http://127.0.0.1:$GWW_ADMIN/db" ;;
        gw-cluster1) echo "--url gw-cluster1@http://127.0.0.1:$GWC_PORT/db --admin-url http://127.0.0.1:$GWC_ADMIN/db" ;;
        *) echo "suite: unknown gateway target $1" >&2; exit 1 ;;
    esac
}
GW_WORKLOADS=$(python3 -c 'import json
for w in json.load(open("suite.json")).get("gateway", []):
    print(w["name"], w["phases"], w["docs"], w["docSize"], w["batch"], w["connections"], w["clients"], w["rounds"], ",".join(w["targets"]))' |
    while read -r name rest; do
        if [ -z "${ONLY:-}" ] || echo ",$ONLY," | grep -q ",$name,"; then echo "$name $rest"; fi
    done)
# Lite's replicator over BLIP against REST on the same gateways (suite.json → liteSync, issue 68's row).
LITESYNC_WORKLOADS=$(python3 -c 'import json
for w in json.load(open("suite.json")).get("liteSync", []):
    print(w["name"], w["docs"], w["docSize"], w["deltaDocs"], w["deltaDocSize"], w["rounds"], ",".join(w["targets"]))' |
    while read -r name rest; do
        if [ -z "${ONLY:-}" ] || echo ",$ONLY," | grep -q ",$name,"; then echo "$name $rest"; fi
    done)
if [ -n "$GW_WORKLOADS$LITESYNC_WORKLOADS" ] && [ ! -x "$GW_BIN" ]; then
    echo "suite: $GW_BIN missing (make release builds it); gateway workloads skipped" >&2
elif [ -n "$GW_WORKLOADS$LITESYNC_WORKLOADS" ]; then
    start_gateway "$WORK/gw-walrus" "walrus:"; PIDS+=("$GW_PID"); GWW_PORT=$GW_PORT; GWW_ADMIN=$GW_ADMIN_PORT
    curl -sf -u Administrator:password -d name=gateway -d ramQuotaMB=256 -d authType=none -d replicaNumber=0 \
        "http://127.0.0.1:$C1/pools/default/buckets" >/dev/null
    sleep 1
    start_gateway "$WORK/gw-cluster1" "http://127.0.0.1:$C1" gateway Administrator password
    PIDS+=("$GW_PID"); GWC_PORT=$GW_PORT; GWC_ADMIN=$GW_ADMIN_PORT
    echo "$GW_WORKLOADS" | while read -r name phases docs dsize batch conns clients grounds targets; do
        [ -n "$name" ] || continue
        args=()
        for t in ${targets//,/ }; do read -ra a <<<"$(gateway_spec "$t")"; args+=("${a[@]}"); done
        echo "== $name"
        "${LOADGEN[@]}" gateway "${args[@]}" --phase "$phases" --docs "$docs" --doc-size "$dsize" --batch "$batch" \
            --connections "$conns" --clients "$clients" --rounds "${GW_ROUNDS:-$grounds}" --quiet \
            --json "$OUT/$name.json" | tee "$OUT/$name.txt"
    done
    echo "$LITESYNC_WORKLOADS" | while read -r name docs dsize ddocs ddsize lrounds targets; do
        [ -n "$name" ] || continue
        args=()
        for t in ${targets//,/ }; do read -ra a <<<"$(gateway_spec "$t")"; args+=("${a[@]}"); done
        echo "== $name"
        "$BENCH" lite-sync "${args[@]}" --docs "$docs" --doc-size "$dsize" --delta-docs "$ddocs" \
            --delta-doc-size "$ddsize" --rounds "${GW_ROUNDS:-$lrounds}" --directory "$WORK" --quiet \
            --json "$OUT/$name.json" | tee "$OUT/$name.txt"
    done
fi
# View index build over JSON documents in-process (suite.json → views, inProcess; issue 19's row): settee-bench views
# stores 100,000 × 1 KiB documents in a real bucket engine and times BucketViews building the index, median of 3.
python3 -c 'import json
for v in json.load(open("suite.json")).get("views", []):
    if v.get("inProcess"): print(v["name"], v["documents"], v["size"], v["rounds"])' |
while read -r name docs size vrounds; do
    if [ -n "${ONLY:-}" ] && ! echo ",$ONLY," | grep -q ",$name,"; then continue; fi
    echo "== $name"
    "$BENCH" views --documents "$docs" --size "$size" --rounds "$vrounds" --directory "$WORK" --name "$name" \
        --json "$OUT/$name.json" | tee "$OUT/$name.txt"
done
# Lite against the SQLite under it: 100,000 saves in one transaction, 10,000 one transaction each (issue 19's rows).
if [ -z "${ONLY:-}" ] || echo ",$ONLY," | grep -q ",lite,"; then
    echo "== lite"
    "$BENCH" lite --directory "$WORK" --json "$OUT/lite.json" | tee "$OUT/lite.txt"
fi
"$BENCH" report --suite suite.json --results "$OUT" \
    --note "$(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores; settee release build; $(memcached -V); $(redis-server --version | cut -d' ' -f1-3)"
echo "report: $(cd "$OUT" && pwd)/report.html"
