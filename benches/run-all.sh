#!/usr/bin/env bash
# benches/run-all.sh: the whole measurement of benches/RESULTS.md in one command.
#
# Builds the release binaries, runs every smdb-bench workload against a freshly spawned server
# (fresh data dir under /tmp, storage.fsync=$FSYNC), the per-core runs (server on core 0, load
# pinned to the last core), the shard scaling curve, and the divan micro benches; prints one
# markdown report on stdout and keeps it with the raw JSON under $OUT.
#
# Environment (all optional):
#   DURATION=10 WARMUP=2   seconds counted / seconds of warm-up per run
#   REPEAT=3               runs per scenario; the table shows the median run and the min-max
#   FSYNC=always           storage.fsync of the spawned servers (always | interval | never)
#   THREADS=1              smdb-bench load threads
#   SCALE=<cpus>           largest shard count of the scaling curve (0 skips it)
#   MICRO=1                run the micro benches (0 skips them)
#   QUICK=1                DURATION=1 WARMUP=0.5 REPEAT=1, short micro benches: a check that
#                          everything runs, not a measurement
#   OUT=target/bench-results/<UTC time>
#   DATA_PARENT=/tmp       where servers get their data dirs (a real disk, never tmpfs)
#
# Quiet machine first: nothing else running (`other cores` in the tables must stay near 0).
set -euo pipefail

cd "$(dirname "$0")/.."
if [ "${QUICK:-0}" = 1 ]; then
    DURATION=${DURATION:-1} WARMUP=${WARMUP:-0.5} REPEAT=${REPEAT:-1}
    MICRO_ARGS=(--sample-count 10 --max-time 0.2)
else
    # At least 0.5 s per micro bench: divan's default (100 samples) gives only 100 iterations
    # of a microsecond-scale function.
    MICRO_ARGS=(--min-time 0.5)
fi
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
REPEAT=${REPEAT:-3}
FSYNC=${FSYNC:-always}
THREADS=${THREADS:-1}
NCPU=$(nproc)
SCALE=${SCALE:-$NCPU}
MICRO=${MICRO:-1}
DATA_PARENT=${DATA_PARENT:-/tmp}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET/bench-results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
LAST=$((NCPU - 1))

echo "building release binaries..." >&2
cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
BENCH="$TARGET/release/smdb-bench"

# run LABEL FILE ARGS...: REPEAT runs of smdb-bench against a spawned server, JSON appended.
run() {
    local label=$1 file=$2
    shift 2
    for i in $(seq 1 "$REPEAT"); do
        echo "  $label (run $i/$REPEAT)" >&2
        "$BENCH" --spawn --fsync "$FSYNC" --data-parent "$DATA_PARENT" --threads "$THREADS" \
            --duration "$DURATION" --warmup "$WARMUP" --json --label "$label" "$@" >>"$file"
    done
}

echo "load: default placement, load generator unpinned (shares the cores)" >&2
SHARED="$OUT/shared.jsonl"
run "apply 16x8" "$SHARED" --workload apply -c 16 --in-flight 8
run "apply 16x1" "$SHARED" --workload apply -c 16 --in-flight 1
run "get 16x8" "$SHARED" --workload get -c 16 --in-flight 8
run "get 16x1" "$SHARED" --workload get -c 16 --in-flight 1
run "create 16x8" "$SHARED" --workload create -c 16 --in-flight 8
run "mixed 16x8" "$SHARED" --workload mixed -c 16 --in-flight 8
run "ping 16x8" "$SHARED" --workload ping -c 16 --in-flight 8

PERCORE="$OUT/per-core.jsonl"
if [ "$NCPU" -ge 2 ]; then
    echo "per core: whole server on core 0 (front, control, shard), load pinned to core $LAST" >&2
    for w in apply get ping; do
        run "$w 16x8 server@0 load@$LAST" "$PERCORE" --workload "$w" -c 16 --in-flight 8 \
            --server-shards 1 --server-cores 0 --pin-cpu "$LAST"
    done
fi

SCALEF="$OUT/scale.jsonl"
if [ "$SCALE" -gt 0 ]; then
    echo "scaling: apply 16x8 with 1..$SCALE shards" >&2
    for i in $(seq 1 "$REPEAT"); do
        "$BENCH" --scale "$SCALE" --fsync "$FSYNC" --data-parent "$DATA_PARENT" \
            --threads "$THREADS" --duration "$DURATION" --warmup "$WARMUP" --json \
            --workload apply -c 16 --in-flight 8 >>"$SCALEF"
    done
fi

MICROF="$OUT/micro.txt"
: >"$MICROF"
if [ "$MICRO" = 1 ]; then
    echo "micro benches (divan)..." >&2
    for b in protocol engine; do
        cargo bench --quiet --bench "$b" -- "${MICRO_ARGS[@]}" >>"$MICROF"
    done
fi
WALF="$OUT/wal.md"
: >"$WALF"
if [ "$MICRO" = 1 ] && grep -q '^name = "wal_append"' Cargo.toml; then
    echo "WAL batch append bench..." >&2
    if [ "${QUICK:-0}" = 1 ]; then
        cargo bench --quiet --bench wal_append >>"$WALF" # without fsync rows only
    else
        cargo bench --quiet --bench wal_append -- --fsync >>"$WALF"
    fi
fi

REPORT="$OUT/report.md"
{
    echo "# smdb benchmark run $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "- commit of the checkout: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    # The binaries themselves (they may be prebuilt from another commit: CARGO_TARGET_DIR).
    for b in smdb-server smdb-bench; do
        echo "- $b: sha256 $(sha256sum "$TARGET/release/$b" | cut -c1-12), built $(date -u -r "$TARGET/release/$b" +%Y-%m-%dT%H:%MZ)"
    done
    echo "- host: $NCPU CPUs, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), Linux $(uname -r)"
    echo "- data dir parent: $DATA_PARENT ($(stat -f -c %T "$DATA_PARENT"), $(df -P "$DATA_PARENT" | awk 'NR==2 {print $1}'))"
    echo "- storage.fsync = $FSYNC; $DURATION s counted after $WARMUP s warm-up; $REPEAT run(s) per row, median shown"
    echo "- load: smdb-bench, $THREADS thread(s), payload 64 B, 10,000 instances, closed loop"
    echo
    echo "## Load, default placement (front + control on core 0, shard on core 1), load unpinned"
    echo
    "$BENCH" --report "$SHARED"
    if [ -s "$PERCORE" ]; then
        echo
        echo "## Per core: the whole server on core 0, load pinned to core $LAST"
        echo
        "$BENCH" --report "$PERCORE"
    fi
    if [ -s "$SCALEF" ]; then
        echo
        echo "## Scaling: apply 16x8 with 1..$SCALE shards (default placement)"
        echo
        "$BENCH" --report "$SCALEF"
    fi
    if [ -s "$MICROF" ]; then
        echo
        echo "## Micro benches (divan; per iteration)"
        echo
        echo '```'
        cat "$MICROF"
        echo '```'
    fi
    if [ -s "$WALF" ]; then
        echo
        echo "## WAL batch append (150 B records, one batch in flight, $DATA_PARENT)"
        echo
        cat "$WALF"
    fi
} >"$REPORT"
cat "$REPORT"
echo "raw results and report: $OUT" >&2
