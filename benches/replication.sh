#!/usr/bin/env bash
# benches/replication.sh: what replication costs a primary (issue 19; benches/RESULTS.md
# "Replication cost").
#
# Alternates, REPEAT times: APPLY_EVENT 16x8 against (1) a standalone server, (2) a primary with
# one async replica attached, (3) a primary in sync mode with one replica. Every server is a
# release build with fsync = "always" (durable) on its own temp data dir; the replica runs on the
# same machine (on a 2-core box it competes with the primary for CPU: the figure is an upper
# bound of the cost). Prints one line per run and a median table; raw JSON under $OUT.
#
# REPLICA_NICE (default 19) starts the replica under `nice -n`: on a 2-core box the replica's
# pinned threads share both cores with the primary's, and at equal priority they delay the
# primary's executors, which a replica on its own host would not; nice lets it use only what
# the primary leaves. REPLICA_NICE=0 gives the equal-priority (worst case) figure.
#
# Environment: DURATION=10 WARMUP=2 REPEAT=3 REPLICA_NICE=19 OUT=target/bench-results/repl-<time>
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
REPEAT=${REPEAT:-3}
REPLICA_NICE=${REPLICA_NICE:-19}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET/bench-results/repl-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "building release binaries..." >&2
cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
SERVER="$TARGET/release/smdb-server"
BENCH="$TARGET/release/smdb-bench"
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do kill -9 "$p" 2>/dev/null || true; done' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start NAME CONFIG_TEXT [NICE]: starts a server, waits for its listening line, sets ADDR to its
# address. Not called in a subshell: its PID must reach PIDS, or stop_all would leave it running.
start() {
    local name=$1 cfg=$2 nice=${3:-0} dir="$OUT/$1-$RANDOM"
    mkdir -p "$dir"
    printf '%s\n[storage]\ndata_dir = "%s/data"\n[metrics]\nenabled = false\n[http]\nenabled = false\n' "$cfg" "$dir" >"$dir/smdb.toml"
    nice -n "$nice" "$SERVER" --config "$dir/smdb.toml" >"$dir/stdout" 2>"$dir/log" &
    PIDS+=($!)
    for _ in $(seq 1 200); do
        if grep -q "listening on" "$dir/stdout" 2>/dev/null; then
            ADDR=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$dir/stdout" | head -1)
            return
        fi
        sleep 0.05
    done
    echo "server $name did not start: $(cat "$dir/log")" >&2
    exit 1
}

stop_all() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    PIDS=()
    rm -rf "$OUT"/*/data # pre-zeroed segments: 64 MiB and more per server
}

# ticks PID...: CPU time (utime + stime, clock ticks) the processes used so far.
ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done | paste -sd+ | bc; }

run() { # LABEL ADDR: the bench, then the CPU seconds each server used during it (PIDS order)
    local before=() after=() p
    for p in "${PIDS[@]}"; do before+=("$(ticks "$p")"); done
    "$BENCH" --addr "$2" --workload apply -c 16 --in-flight 8 --duration "$DURATION" \
        --warmup "$WARMUP" --json --label "$1" >>"$OUT/repl.jsonl"
    for p in "${PIDS[@]}"; do after+=("$(ticks "$p")"); done
    local hz k cpu=()
    hz=$(getconf CLK_TCK)
    for k in "${!PIDS[@]}"; do cpu+=("$(echo "scale=2; (${after[$k]} - ${before[$k]}) / $hz" | bc)"); done
    echo "  server CPU seconds during the run (primary, replica): ${cpu[*]}" >&2
    tail -1 "$OUT/repl.jsonl" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r.get("label"), round(r.get("ops_per_sec", r.get("throughput", 0))), "ops/s")' >&2 || true
}

for i in $(seq 1 "$REPEAT"); do
    echo "run $i/$REPEAT" >&2
    start standalone "[network]
bind_addr = \"127.0.0.1:0\""
    run "standalone" "$ADDR"; stop_all

    for mode in async sync; do
        port=$(free_port)
        start "primary-$mode" "[network]
bind_addr = \"127.0.0.1:$port\"
[replication]
role = \"primary\"
mode = \"$mode\""
        addr=$ADDR
        start "replica-$mode" "[network]
bind_addr = \"127.0.0.1:0\"
[replication]
role = \"replica\"
upstream = \"$addr\"
replica_id = \"bench\"" "$REPLICA_NICE"
        sleep 1
        run "primary + 1 $mode replica" "$addr"; stop_all
    done
done

python3 - "$OUT/repl.jsonl" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["label"], []).append(r)
def ops(r): return r.get("ops_per_sec") or r.get("throughput") or 0
def p99(r): return (r.get("latency_us") or {}).get("p99") or r.get("p99_us") or 0
base = statistics.median(ops(r) for r in rows.get("standalone", [{}]))
print("| setup | APPLY_EVENT 16x8 ops/s (median) | runs | p99 µs (median) | vs standalone |")
print("|---|---:|---|---:|---:|")
for label, rs in rows.items():
    m = statistics.median(ops(r) for r in rs)
    print(f"| {label} | {m:,.0f} | {', '.join(f'{ops(r):,.0f}' for r in rs)} | {statistics.median(p99(r) for r in rs):,.0f} | {100*(m/base-1):+.1f}% |")
PY
