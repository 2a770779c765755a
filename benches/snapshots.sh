#!/usr/bin/env bash
# benches/snapshots.sh: issue 36's load figures. APPLY_EVENT 16x8 on $INSTANCES pre-created
# instances for $DURATION s, with snapshots every $EVERY entries ("on") and with snapshots (so
# compaction) out of reach ("off"), for each server binary in $BINS, alternated $ROUNDS times.
# Per run: smdb-bench's JSON line (ops/s, p99.9, max), benches/windows.py's half-second
# windows (how many fell below 0.9 x the median), and the server's snapshot log lines
# (duration, bytes, longest slice). Everything goes to $OUT/.
#
# Environment (all optional):
#   BINS="after=target/release/smdb-server"   label=binary pairs, space-separated
#   BENCH=target/release/smdb-bench
#   INSTANCES=1000000  EVERY=400000  DURATION=30  WARMUP=2  ROUNDS=3  MODES="off on"
#   FILL=0             >0: instead of pre-creating, fill this many instances with
#                      `smdb-bench --fill` (one event each) before the load, which then
#                      applies to the default 10,000 pre-created instances
#   OUT=/tmp/smdb-snapshots-<time>   DATA_PARENT=/tmp (a real disk, never tmpfs)
set -euo pipefail
cd "$(dirname "$0")/.."
BINS=${BINS:-"after=target/release/smdb-server"}
BENCH=${BENCH:-target/release/smdb-bench}
INSTANCES=${INSTANCES:-1000000}
EVERY=${EVERY:-400000}
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-"off on"}
FILL=${FILL:-0}
DATA_PARENT=${DATA_PARENT:-/tmp}
OUT=${OUT:-/tmp/smdb-snapshots-$(date +%H%M%S)}
mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
PID=
cleanup() { [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true; }
trap cleanup EXIT

run() { # label bin mode round
    local label=$1 bin=$2 mode=$3 round=$4
    local every=$EVERY
    [ "$mode" = off ] && every=1000000000000
    local dir
    dir=$(mktemp -d "$DATA_PARENT/smdb-snapbench-XXXXXX")
    cat >"$dir/smdb.toml" <<CFG
[network]
bind_addr = "127.0.0.1:$PORT"
[storage]
data_dir = "$dir/data"
snapshot_every_entries = $every
[metrics]
enabled = false
[http]
enabled = false
CFG
    local tag="$label-$mode-$round"
    "$bin" --config "$dir/smdb.toml" >"$OUT/$tag.out" 2>"$OUT/$tag.err" &
    PID=$!
    for _ in $(seq 1 3000); do
        grep -q "listening on" "$OUT/$tag.out" 2>/dev/null && break
        sleep 0.01
    done
    local instances=$INSTANCES start=$((INSTANCES + 1))
    if [ "$FILL" -gt 0 ]; then
        "$BENCH" --addr "127.0.0.1:$PORT" --server-pid "$PID" --fill --instances "$FILL" \
            --events-per-instance 1 -c 4 --in-flight 64 >"$OUT/$tag.fill" 2>&1
        instances=10000
        start=$(( $(python3 - "$PORT" <<'PY'
import sys; sys.path.insert(0, "benches"); import rcp1
c = rcp1.Conn("127.0.0.1:" + sys.argv[1])
print(sum(s["wal_offset"] for s in c.call("INFO", {})["shard_details"]))
PY
) + instances + 1))
    fi
    python3 benches/windows.py --addr "127.0.0.1:$PORT" --start "$start" --skip "$WARMUP" \
        --windows $((DURATION * 2)) --label "$tag" >"$OUT/$tag.windows" &
    local wpid=$!
    "$BENCH" --addr "127.0.0.1:$PORT" --server-pid "$PID" --workload apply -c 16 --in-flight 8 \
        --instances "$instances" --duration "$DURATION" --warmup "$WARMUP" --json \
        --label "$tag" >"$OUT/$tag.json" 2>"$OUT/$tag.bench.err" || true
    wait "$wpid" || true
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    PID=
    grep -h "snapshot" "$OUT/$tag.err" >"$OUT/$tag.snapshots" || true
    du -sb "$dir/data" | cut -f1 >"$OUT/$tag.disk"
    rm -rf "$dir"
    echo "$tag: $(python3 -c 'import json,sys; b=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); w=json.loads(open(sys.argv[2]).read()); l=b["latency_us"]; print(round(b["ops_per_sec"]), "ops/s p99.9", round(l["p999"]), "us max", round(l["max"]), "us; windows below 0.9x median:", w["below_0_9"], "of", w["windows"], "median", w["median"])' "$OUT/$tag.json" "$OUT/$tag.windows" 2>/dev/null || echo '(no figures)')" | tee -a "$OUT/summary"
    grep -o "snapshot at offset.*" "$OUT/$tag.snapshots" | sed 's/^/  /' | tee -a "$OUT/summary" || true
}

for round in $(seq 1 "$ROUNDS"); do
    for pair in $BINS; do
        for mode in $MODES; do
            run "${pair%%=*}" "${pair#*=}" "$mode" "$round"
        done
    done
done
echo "results in $OUT"
