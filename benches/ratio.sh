#!/usr/bin/env bash
# benches/ratio.sh: issue 16's figure, instance changes per second with atomic batches of 10
# against single APPLY_EVENTs, both at 16 connections x 8 in flight, one fresh server each
# (smdb-bench --spawn, storage.fsync = always). One line per round:
#   apply=<ops/s> batches=<batches/s> ratio=<10 * batches / apply>
#
#   benches/ratio.sh [ROUNDS] [SECONDS]        (defaults: 5 rounds of 5 s after 2 s warm-up)
#   BIN=/path/to/dir benches/ratio.sh          smdb-bench and smdb-server from another build
#
# Run on a quiet machine; the window's speed drifts, so compare builds alternated (A B B A).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
    BIN=${CARGO_TARGET_DIR:-target}/release
fi
rate() {
    "$BIN/smdb-bench" --spawn --server-bin "$BIN/smdb-server" -c 16 --in-flight 8 \
        --duration "$SECS" --warmup 2 --json "$@" |
        python3 -c 'import json, sys; print(round(json.load(sys.stdin)["ops_per_sec"]))'
}
for _ in $(seq 1 "$ROUNDS"); do
    apply=$(rate --workload apply)
    batches=$(rate --workload batch --batch-size 10)
    python3 -c "a, b = $apply, $batches; print(f'apply={a} batches={b} ratio={10 * b / a:.2f}')"
done
