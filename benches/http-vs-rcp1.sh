#!/usr/bin/env bash
# benches/http-vs-rcp1.sh: APPLY_EVENT and GET_INSTANCE over the HTTP API (keep-alive)
# against RCP1 at the same number of requests in flight, alternated in one session, one fresh
# server per run (smdb-bench --spawn, storage.fsync = always, default placement).
#
# Shapes, all 128 requests in flight:
#   rcp1 16x8        16 connections x 8 pipelined (the project's usual shape)
#   http 16x8        16 keep-alive connections x 8 pipelined HTTP/1.1 requests
#   http 128x1       128 keep-alive connections, one request at a time (what most HTTP
#                    clients do)
#   rcp1 128x1       the same shape over RCP1
# One JSON line per run goes to $OUT/runs.jsonl; the summary prints medians and min-max.
#
#   benches/http-vs-rcp1.sh [ROUNDS] [SECONDS]     (defaults: 5 rounds of 5 s after 2 s)
#   BIN=/path/to/dir benches/http-vs-rcp1.sh       binaries from another build
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet --bin smdb-server --bin smdb-bench
    BIN=${CARGO_TARGET_DIR:-target}/release
fi
OUT=${OUT:-${CARGO_TARGET_DIR:-target}/bench-results/http-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
run() {
    local label=$1
    shift
    "$BIN/smdb-bench" --spawn --server-bin "$BIN/smdb-server" --duration "$SECS" --warmup 2 \
        --json --label "$label" "$@" >>"$OUT/runs.jsonl"
}
for i in $(seq 1 "$ROUNDS"); do
    echo "round $i/$ROUNDS" >&2
    for w in apply get; do
        run "$w rcp1 16x8" --workload "$w" -c 16 --in-flight 8
        run "$w http 16x8" --workload "$w" -c 16 --in-flight 8 --http
        run "$w http 128x1" --workload "$w" -c 128 --in-flight 1 --http
        run "$w rcp1 128x1" --workload "$w" -c 128 --in-flight 1
    done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in runs:
    by.setdefault(r["label"], []).append(r)
def med(rs, f):
    return statistics.median(f(r) for r in rs)
print("| run | n | ops/s median | min-max | p50 ms | p99 ms | server CPU (cores) | other (cores) |")
print("|---|---|---|---|---|---|---|---|")
for label, rs in by.items():
    ops = [r["ops_per_sec"] for r in rs]
    lat = lambda k: med(rs, lambda r: r["latency_us"][k] / 1000)
    cpu = med(rs, lambda r: r["cpu"]["server_cores"])
    other = med(rs, lambda r: r["cpu"]["other_cores"])
    print(f"| {label} | {len(rs)} | {statistics.median(ops):,.0f} | {min(ops):,.0f}-{max(ops):,.0f} | {lat('p50'):.2f} | {lat('p99'):.2f} | {cpu:.2f} | {other:.2f} |")
for w in ("apply", "get"):
    for shape in ("16x8", "128x1"):
        h = by.get(f"{w} http {shape}")
        r1 = by.get(f"{w} rcp1 {shape}")
        if h and r1:
            # Runs alternate, so run k of one shape pairs with run k of the other.
            ratios = sorted(a["ops_per_sec"] / b["ops_per_sec"] for a, b in zip(h, r1))
            print(f"{w} {shape}: http / rcp1 = {statistics.median(ratios):.2f} (per round {ratios[0]:.2f}-{ratios[-1]:.2f})")
PY
echo "raw: $OUT/runs.jsonl" >&2
