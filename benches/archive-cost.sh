#!/usr/bin/env bash
# benches/archive-cost.sh: what the WAL archive (storage.archive_dir) costs the write path, as
# in benches/RESULTS.md (issue 38: goal within 5%, median of at least 5 alternated pairs).
#
# Alternates APPLY_EVENT 16x8 runs against servers spawned from the same binary without and
# with `storage.archive_dir` (on the same disk as the data dir, the worst case: the archiver's
# reads and fsyncs share the log's device). Each pair runs off first on odd rounds and archive
# first on even ones. Prints one line per pair (ops/s off, on, ratio) and the median ratio with
# its spread, and keeps the raw JSON under $OUT.
#
# Environment: PAIRS=5 DURATION=15 WARMUP=2 FSYNC=always SEGMENT_BYTES=(server default)
#              SKIP_BUILD=1 (use the release binaries as they are)
#              OUT=target/bench-results/archive-<time>
set -euo pipefail

cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-5}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-2}
FSYNC=${FSYNC:-always}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET/bench-results/archive-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -z "${SKIP_BUILD:-}" ]; then
    echo "building release binaries..." >&2
    cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
fi
BENCH="$TARGET/release/smdb-bench"

segment=""
if [ -n "${SEGMENT_BYTES:-}" ]; then segment="segment_bytes = $SEGMENT_BYTES"; fi
printf '[storage]\n%s\n' "$segment" >"$OUT/off.toml"
RAW="$OUT/archive.jsonl"
rate() { # label, config -> ops/s
    local label=$1 cfg=$2
    "$BENCH" --spawn --fsync "$FSYNC" --duration "$DURATION" --warmup "$WARMUP" --json \
        --workload apply -c 16 --in-flight 8 --label "$label" --server-config "$cfg" |
        tee -a "$RAW" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ops_per_sec"])'
}
printf '[storage]\n%s\narchive_dir = "%s"\n' "$segment" "$OUT/archive" >"$OUT/on.toml"
archived() { # the on run with a fresh archive dir; sets $on and $segs
    rm -rf "$OUT/archive"
    on=$(rate "apply 16x8 archive" "$OUT/on.toml")
    segs=$(find "$OUT/archive" -name '*.seg' 2>/dev/null | wc -l)
}
ratios=()
for i in $(seq 1 "$PAIRS"); do
    if [ $((i % 2)) -eq 1 ]; then
        off=$(rate "apply 16x8 no archive" "$OUT/off.toml")
        archived
    else
        archived
        off=$(rate "apply 16x8 no archive" "$OUT/off.toml")
    fi
    ratio=$(python3 -c "print(f'{$on / $off:.3f}')")
    ratios+=("$ratio")
    echo "pair $i: off=${off%.*} on=${on%.*} ratio=$ratio (segments archived in the on run: $segs)"
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = sorted(float(x) for x in sys.argv[1:])
print(f"median ratio {statistics.median(r):.3f} (min {r[0]:.3f}, max {r[-1]:.3f}, {len(r)} pairs)")
PY
