#!/usr/bin/env bash
# benches/cluster-scale.sh: aggregate throughput of N cluster groups against one (issue 51).
# Meant for a larger host: each group (one member here, no followers) gets its own shard cores
# through `shards.cores`, the load generator its own cores (--pin-cpu), and the load grows with
# the groups (CONNS_PER_GROUP connections x IN_FLIGHT per group, routed by slot with
# `smdb-bench --cluster`). For each round, every N of COUNTS in turn on fresh servers and data
# dirs; one line per run, then per N the median ops/s, its ratio to N=1 and the scaling
# efficiency (ratio / N):
#   round 1: groups=1 ops=<ops/s> | groups=2 ops=<ops/s> (x<ratio>) | ...
#
#   benches/cluster-scale.sh [COUNTS] [SECONDS]   (defaults: "1 2 4", 10 s after 2 s warm-up)
#   ROUNDS=3                    rounds (N=1, 2, 4, N=1, 2, 4, ...)
#   SHARDS_PER_GROUP=1          shards.count of every member; group i (0-based) runs its shards
#                               on cores FIRST_CORE + i*SHARDS_PER_GROUP ..
#   FIRST_CORE=1                first shard core (default: right after core 0, or after the
#                               front cores with FRONTS=<n>)
#   FRONTS=on_shards            every member runs its fronts on its own shard cores
#                               (network.fronts_on_shards = true, the default here); a number n
#                               gives every member n front executors instead (acceptor_cores)
#   LOAD_CORES=<last cores>     CPUs of the load threads (--pin-cpu), default the last
#                               LOAD_THREADS cores of the host
#   LOAD_THREADS=2              smdb-bench load threads
#   CONNS_PER_GROUP=16 IN_FLIGHT=8
#   STORAGE='fsync = "never"'   extra [storage] lines (default: fsync always)
#   BIN=/path/to/dir            smdb-server, smdb-bench, smdb-cli of a build
#   QUICK=1                     COUNTS="1 2" ROUNDS=1 1 s runs on whatever cores there are: a
#                               check that the script runs, not a measurement
#
# Example, a 16-core host, 4 groups of 2 shards on cores 1-8, load on 12-15:
#   SHARDS_PER_GROUP=2 LOAD_THREADS=4 benches/cluster-scale.sh "1 2 4" 10
#
# Placement: separate front executors (FRONTS=<n>) always run on cores 0..n-1 and the control
# executor on core 0 (src/boot/placement.rs), so with FRONTS=<n> every member's fronts share
# those cores and may bound the curve (check `server_threads` in the JSON: with OUT=file.jsonl
# every run's smdb-bench line is kept). With FRONTS=on_shards each member's connections are
# served on its own shard cores; only the (light) control executors share core 0.
#
# Needs etcd and curl. Every process and temp dir is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${QUICK:-0}" = 1 ]; then
    COUNTS=${1:-1 2} SECS=${2:-1} ROUNDS=${ROUNDS:-1} WARMUP=${WARMUP:-0.5}
else
    COUNTS=${1:-1 2 4} SECS=${2:-10}
fi
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2}
NCPU=$(nproc)
FRONTS=${FRONTS:-on_shards}
SHARDS_PER_GROUP=${SHARDS_PER_GROUP:-1}
if [ "$FRONTS" = on_shards ]; then
    NET="fronts_on_shards = true"
    FIRST_CORE=${FIRST_CORE:-1}
else
    NET="acceptor_cores = $FRONTS"
    FIRST_CORE=${FIRST_CORE:-$FRONTS}
fi
LOAD_THREADS=${LOAD_THREADS:-2}
CONNS_PER_GROUP=${CONNS_PER_GROUP:-16}
IN_FLIGHT=${IN_FLIGHT:-8}
if [ -z "${LOAD_CORES:-}" ]; then
    LOAD_CORES=$(seq -s, $((NCPU > LOAD_THREADS ? NCPU - LOAD_THREADS : 0)) $((NCPU - 1)))
fi
max_n=$(tr ' ' '\n' <<<"$COUNTS" | sort -n | tail -1)
need=$((FIRST_CORE + max_n * SHARDS_PER_GROUP + LOAD_THREADS))
if [ "$need" -gt "$NCPU" ]; then
    echo "warning: $max_n groups want $need cores (fronts, shards, load), the host has $NCPU:" \
        "executors will share cores and the curve shows sharing, not scaling" >&2
fi
# shellcheck source=benches/cluster-lib.sh
. benches/cluster-lib.sh
cl_build
cl_start_etcd

# run N: N groups on their cores, the load, stop; prints ops/s.
run() {
    local n=$1 members=() i cores seed
    cl_new_cluster
    for i in $(seq 0 $((n - 1))); do
        cores=$(seq -s, $(((FIRST_CORE + i * SHARDS_PER_GROUP) % NCPU)) \
            $(((FIRST_CORE + (i + 1) * SHARDS_PER_GROUP - 1) % NCPU)))
        # A range that wraps past the last core is placed from core 0 (sharing).
        [ -z "$cores" ] && cores=$(((FIRST_CORE + i * SHARDS_PER_GROUP) % NCPU))
        cl_start "m$i" "cluster:g$i" "$(printf '[shards]\ncount = %s\ncores = [%s]' \
            "$SHARDS_PER_GROUP" "$cores")" "$NET"
        members+=("m$i")
    done
    for i in "${members[@]}"; do cl_wait_ready "$i"; done
    cl_create_map "${members[0]}" "${members[@]}"
    seed=PORT_${members[0]}
    "$BIN/smdb-bench" --cluster --addr "127.0.0.1:${!seed}" -w apply \
        -c $((CONNS_PER_GROUP * n)) --in-flight "$IN_FLIGHT" --threads "$LOAD_THREADS" \
        --pin-cpu "$LOAD_CORES" --duration "$SECS" --warmup "$WARMUP" --json \
        --label "cluster groups=$n" >"$work/run.json"
    cl_stop "${members[@]}"
    if [ -n "${OUT:-}" ]; then cat "$work/run.json" >>"$OUT"; fi
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
if r["errors_total"]:
    print("errors in the window:", r["errors"], file=sys.stderr)
print(round(r["ops_per_sec"]))' "$work/run.json"
}

declare -A all
for r in $(seq 1 "$ROUNDS"); do
    line="round $r:"
    for n in $COUNTS; do
        ops=$(run "$n")
        all[$n]="${all[$n]:-} $ops"
        line+=" groups=$n ops=$ops |"
    done
    echo "${line% |}"
done
python3 - "$(for n in $COUNTS; do echo "$n:${all[$n]}"; done)" <<'PY'
import statistics, sys
rows = [(int(n), [float(x) for x in v.split()])
        for n, _, v in (l.partition(":") for l in sys.argv[1].splitlines())]
base = statistics.median(dict(rows).get(1, rows[0][1]))
for n, v in rows:
    m = statistics.median(v)
    print(f"groups={n}: median {m:,.0f} ops/s (min {min(v):,.0f}, max {max(v):,.0f}); "
          f"x{m / base:.2f} of one group, efficiency {m / base / n:.2f}")
PY
