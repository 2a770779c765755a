#!/usr/bin/env bash
# benches/backup.sh: issue 38's backup figures. A release server with $INSTANCES instances
# under APPLY_EVENT 16x8 (smdb-bench); once the load has run $BEFORE s, `smdb-cli backup --out`
# runs against it. Reports the backup's duration and size, the load's log growth (entries/s,
# from INFO's per-shard offsets) over the $BEFORE s before the backup and while it ran, and
# their ratio (goal: at least 0.8), then starts a server on the backup and reports how long it
# took to listen. Everything goes to $OUT/.
#
# Environment (all optional):
#   SERVER=target/release/smdb-server  CLI=target/release/smdb-cli  BENCH=target/release/smdb-bench
#   INSTANCES=1000000  EVERY=400000 (storage.snapshot_every_entries)  BEFORE=10  ROUNDS=1
#   OUT=/tmp/smdb-backup-<time>   DATA_PARENT=/tmp (a real disk, never tmpfs)
#   BACKUP_PARENT=$DATA_PARENT (where the backup is written: /dev/shm shows what the backup
#   costs without its writes competing with the log's fsyncs on the same disk)
#   CLI_NICE=0 (nice value of smdb-cli: on a small host the CLI shares the CPUs with the load)
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER=${SERVER:-target/release/smdb-server}
CLI=${CLI:-target/release/smdb-cli}
BENCH=${BENCH:-target/release/smdb-bench}
INSTANCES=${INSTANCES:-1000000}
EVERY=${EVERY:-400000}
BEFORE=${BEFORE:-10}
ROUNDS=${ROUNDS:-1}
DATA_PARENT=${DATA_PARENT:-/tmp}
BACKUP_PARENT=${BACKUP_PARENT:-$DATA_PARENT}
CLI_NICE=${CLI_NICE:-0}
OUT=${OUT:-/tmp/smdb-backup-$(date +%H%M%S)}
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# The sum of the shards' log offsets and the time, as "offset seconds".
offset() {
    python3 - "$1" <<'PY'
import sys, time; sys.path.insert(0, "benches"); import rcp1
c = rcp1.Conn(sys.argv[1])
print(sum(s["wal_offset"] for s in c.call("INFO", {})["shard_details"]), time.time())
PY
}

# Starts $SERVER on config $1 (stdout to $2); waits for its listening line; sets PID.
start() {
    "$SERVER" --config "$1" >"$2" 2>"$2.err" &
    PID=$!
    PIDS+=("$PID")
    for _ in $(seq 1 6000); do
        grep -q "listening on" "$2" 2>/dev/null && return 0
        sleep 0.01
    done
    echo "the server did not start: $(tail -5 "$2.err")" >&2
    return 1
}

round() {
    local r=$1 port=$((20000 + RANDOM % 20000))
    local dir
    dir=$(mktemp -d "$DATA_PARENT/smdb-backupbench-XXXXXX")
    cat >"$dir/smdb.toml" <<CFG
[network]
bind_addr = "127.0.0.1:$port"
[storage]
data_dir = "$dir/data"
snapshot_every_entries = $EVERY
[metrics]
enabled = false
CFG
    start "$dir/smdb.toml" "$OUT/server-$r.out"
    local addr="127.0.0.1:$port"
    "$BENCH" --addr "$addr" --server-pid "$PID" --workload apply -c 16 --in-flight 8 \
        --instances "$INSTANCES" --duration 600 --warmup 2 --json \
        >"$OUT/bench-$r.json" 2>"$OUT/bench-$r.err" &
    local bench=$!
    PIDS+=("$bench")
    # The load starts once the pre-created instances are in the log.
    until [ "$(offset "$addr" | cut -d' ' -f1)" -gt "$INSTANCES" ]; do sleep 0.5; done
    sleep 2
    read -r o0 t0 < <(offset "$addr")
    sleep "$BEFORE"
    read -r o1 t1 < <(offset "$addr")
    local out
    out="$(mktemp -d "$BACKUP_PARENT/smdb-backup-XXXXXX")/backup"
    local b0 b1
    b0=$(date +%s.%N)
    nice -n "$CLI_NICE" "$CLI" --addr "$addr" backup --out "$out" >"$OUT/backup-$r.out" 2>&1
    b1=$(date +%s.%N)
    read -r o2 t2 < <(offset "$addr")
    kill -9 "$bench" 2>/dev/null || true
    wait "$bench" 2>/dev/null || true
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    local bytes
    bytes=$(du -sb "$out" | cut -f1)
    # A server on a copy of the backup: time to listen.
    mkdir -p "$dir/restored"
    cp -r "$out" "$dir/restored/data"
    sed -e "s#$dir/data#$dir/restored/data#" "$dir/smdb.toml" >"$dir/restored.toml"
    local s0 s1
    s0=$(date +%s.%N)
    start "$dir/restored.toml" "$OUT/restored-$r.out"
    s1=$(date +%s.%N)
    kill -9 "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    python3 - "$o0" "$t0" "$o1" "$t1" "$o2" "$t2" "$b0" "$b1" "$bytes" "$s0" "$s1" <<'PY' |
import sys
o0, t0, o1, t1, o2, t2, b0, b1, size, s0, s1 = map(float, sys.argv[1:])
before = (o1 - o0) / (t1 - t0)
during = (o2 - o1) / (t2 - t1)
print(f"backup {b1 - b0:.1f} s, {size / 1e6:.0f} MB; load before {before:,.0f} entries/s, "
      f"during {during:,.0f} entries/s ({during / before:.2f}x); "
      f"a server on the backup listens after {s1 - s0:.2f} s")
PY
        tee -a "$OUT/summary"
    grep -h "backup:" "$OUT/server-$r.out.err" | sed 's/^/  /' | tee -a "$OUT/summary" || true
    rm -rf "$dir" "$(dirname "$out")"
}

for r in $(seq 1 "$ROUNDS"); do
    round "$r"
done
echo "results in $OUT"
