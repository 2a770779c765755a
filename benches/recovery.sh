#!/usr/bin/env bash
# benches/recovery.sh: time to recover ~1 million log entries (issue 3's recovery goal).
#
# Starts a release smdb-server on a fresh data dir (fsync=never so writing is quick; snapshots
# pushed out of reach so the restart replays every entry), drives APPLY_EVENT load with
# smdb-bench until the log holds at least $ENTRIES entries, SIGKILLs the server, then restarts
# it $REPEAT times and prints each "shard recovered N log entries in T" line and the time from
# exec to "listening". Figures go to benches/RESULTS.md.
#
# Environment (all optional):
#   ENTRIES=1000000   entries to write before the kill (the load runs in 5 s steps)
#   REPEAT=3          restarts timed
#   SHARDS=1          shards.count
#   PAYLOAD=64        --payload-bytes of the APPLY_EVENT load
#   INSTANCES=10000   instances each load step creates and then applies events to
#   STEP=5            seconds per load step (each step adds INSTANCES new instances)
#   DATA_PARENT=/tmp  where the data dir goes (a real disk, never tmpfs)
#   KEEP=0            1 keeps the data dir (its path is printed) for profiling
#   REUSE=<dir>       time restarts of a data dir kept by KEEP=1 instead of writing a new one
#                     (how a change to recovery is compared on the same log)
set -euo pipefail

cd "$(dirname "$0")/.."
ENTRIES=${ENTRIES:-1000000}
REPEAT=${REPEAT:-3}
SHARDS=${SHARDS:-1}
PAYLOAD=${PAYLOAD:-64}
INSTANCES=${INSTANCES:-10000}
STEP=${STEP:-5}
DATA_PARENT=${DATA_PARENT:-/tmp}
KEEP=${KEEP:-0}
TARGET=${CARGO_TARGET_DIR:-target}

echo "building release binaries..." >&2
cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
SERVER="$TARGET/release/smdb-server"
BENCH="$TARGET/release/smdb-bench"

if [ -n "${REUSE:-}" ]; then
    DIR=$REUSE
    KEEP=1
else
    DIR=$(mktemp -d "$DATA_PARENT/smdb-recovery-XXXXXX")
fi
PID=
cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true
    if [ "$KEEP" = 1 ]; then echo "data kept in $DIR" >&2; else rm -rf "$DIR"; fi
}
trap cleanup EXIT

[ -z "${REUSE:-}" ] && cat >"$DIR/smdb.toml" <<EOF
[network]
bind_addr = "127.0.0.1:0"
[storage]
data_dir = "$DIR/data"
fsync = "never"
snapshot_every_entries = 1000000000
[shards]
count = $SHARDS
[metrics]
enabled = false
[http]
enabled = false
EOF

# start: runs the server in the background, sets PID and ADDR once it listens.
start() {
    : >"$DIR/out" && : >"$DIR/err"
    "$SERVER" --config "$DIR/smdb.toml" >"$DIR/out" 2>"$DIR/err" &
    PID=$!
    for _ in $(seq 1 6000); do
        ADDR=$(sed -n 's/^smdb-server listening on \([^ ]*\) .*/\1/p' "$DIR/out")
        [ -n "$ADDR" ] && return 0
        kill -0 "$PID" 2>/dev/null || { cat "$DIR/err" >&2; exit 1; }
        sleep 0.01
    done
    echo "server did not start" >&2
    exit 1
}

# entries: log entries written so far (sum of the shards' wal_offset in INFO).
entries() {
    "$TARGET/release/smdb-cli" --addr "$ADDR" --json info |
        grep -o '"wal_offset":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}'
}

[ -z "${REUSE:-}" ] && start
while [ -z "${REUSE:-}" ] && [ "$(entries)" -lt "$ENTRIES" ]; do
    "$BENCH" --addr "$ADDR" --workload apply -c 16 --in-flight 8 --duration "$STEP" --warmup 0 \
        --instances "$INSTANCES" --payload-bytes "$PAYLOAD" >/dev/null
    echo "  entries so far: $(entries)" >&2
done
if [ -n "$PID" ]; then
    kill -9 "$PID"
    wait "$PID" 2>/dev/null || true
    PID=
fi

echo "recovery of the log in $DIR/data ($(du -sh "$DIR"/data | cut -f1)):"
for i in $(seq 1 "$REPEAT"); do
    t0=$(date +%s.%N)
    start
    t1=$(date +%s.%N)
    line=$(grep -h "shard recovered" "$DIR/err" | sed 's/^.*shard recovered/shard recovered/')
    printf '  run %d: exec to listening %.3f s; %s\n' "$i" "$(echo "$t1 - $t0" | bc)" "$line"
    kill -9 "$PID"
    wait "$PID" 2>/dev/null || true
    PID=
done
