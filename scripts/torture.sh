#!/usr/bin/env bash
# make torture: the fault matrix. 3 nodes / 1 replica and 5 nodes / 2 replicas, auto-failover on and off,
# every fault kind of settee-torture; each run in fresh network namespaces, judged from its history.
# Writes test-output/torture/<stamp>/report.md (all runs) and one directory per run (history.json, node logs).
#   env: TORTURE_SEED (one seed for every run; random otherwise, printed per run), TORTURE_ONLY (a regex of run
#        names to keep, e.g. 'n5.*isolate'), TORTURE_ROUNDS (faults per run, default 2)
# Bounded: each run is killed after 300 s; the whole matrix (24 runs) takes about 30 minutes on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "make torture: needs root (network namespaces and routes); nothing was run" >&2
    exit 3
fi
BIN="${SETTEE_TORTURE_BIN:-.build/debug/settee-torture}"
SERVER="${SETTEE_SERVER_BIN:-.build/debug/settee-server}"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
OUT="test-output/torture/$stamp"
mkdir -p "$OUT"
report="$OUT/report.md"
echo "# settee-torture matrix, $stamp" >"$report"
echo >>"$report"
summary=()
failed=0
for shape in "3 1" "5 2"; do
    set -- $shape
    nodes=$1 replicas=$2
    for afo in off on; do
        scenarios="kill pause isolate isolate-orchestrator partial-partition"
        # A full disk and a rebalance under a flapping link are not failover faults: once, with auto-failover on.
        [ "$afo" = on ] && scenarios="$scenarios disk-full rebalance-flap"
        for scenario in $scenarios; do
            name="n${nodes}r${replicas}-afo-${afo}-${scenario}"
            if [ -n "${TORTURE_ONLY:-}" ] && ! [[ "$name" =~ $TORTURE_ONLY ]]; then continue; fi
            args=(--nodes "$nodes" --replicas "$replicas" --scenario "$scenario" --rounds "${TORTURE_ROUNDS:-2}"
                --out "$OUT/$name" --server-binary "$SERVER")
            [ "$afo" = on ] && args+=(--auto-failover)
            [ -n "${TORTURE_SEED:-}" ] && args+=(--seed "$TORTURE_SEED")
            echo "== $name"
            start=$(date +%s)
            timeout --signal=INT --kill-after=20 300 "$BIN" "${args[@]}" >"$OUT/$name.out" 2>&1
            rc=$?
            secs=$(( $(date +%s) - start ))
            if [ -f "$OUT/$name/report.md" ]; then cat "$OUT/$name/report.md" >>"$report"; fi
            case $rc in
                0) verdict=PASS ;;
                1) verdict=FAIL; failed=$((failed + 1)) ;;
                *) verdict="ERROR (exit $rc, see $OUT/$name.out)"; failed=$((failed + 1))
                   echo "## $name: harness error (exit $rc)" >>"$report"; tail -5 "$OUT/$name.out" >>"$report" ;;
            esac
            echo "   $verdict in ${secs}s ($(grep -o 'seed [0-9]*' "$OUT/$name.out" | head -1))"
            summary+=("| $name | $verdict | $(grep -o 'lost[^|]*|[^|]*' "$OUT/$name/report.md" 2>/dev/null | head -1 | sed 's/.*| //') | ${secs}s |")
        done
    done
done
{
    echo
    echo "## Summary"
    echo
    echo "| run | verdict | acknowledged inserts lost | time |"
    echo "|---|---|---|---|"
    printf '%s\n' "${summary[@]}"
} >>"$report"
printf '%s\n' "${summary[@]}"
echo "report: $report"
[ "$failed" = 0 ]
