#!/usr/bin/env bash
# benches/restore.sh: issue 38's restore and replay figure. A release server with
# storage.archive_dir; a backup of it right after it starts (empty but for what smdb-bench
# sets up), then APPLY_EVENT 16x8 for $DURATION s over $INSTANCES instances, so everything
# after the backup is in the archive; once the archive holds every shard's head, the server is
# killed and `smdb-server restore --backup --archive` rebuilds a data dir. Reports the entries
# replayed, the restore's time and rate (entries/s), and how long a server on the result takes
# to listen. Everything goes to $OUT/.
#
# Environment (all optional):
#   SERVER=target/release/smdb-server  CLI=target/release/smdb-cli  BENCH=target/release/smdb-bench
#   INSTANCES=100000  DURATION=30  SEGMENT_BYTES=67108864  OUT=/tmp/smdb-restore-<time>
#   DATA_PARENT=/tmp (a real disk, never tmpfs)   DROP_CACHES=1 (drop the page cache first: root)
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER=${SERVER:-target/release/smdb-server}
CLI=${CLI:-target/release/smdb-cli}
BENCH=${BENCH:-target/release/smdb-bench}
INSTANCES=${INSTANCES:-100000}
DURATION=${DURATION:-30}
SEGMENT_BYTES=${SEGMENT_BYTES:-67108864}
DATA_PARENT=${DATA_PARENT:-/tmp}
DROP_CACHES=${DROP_CACHES:-1}
OUT=${OUT:-/tmp/smdb-restore-$(date +%H%M%S)}
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Per shard head offsets as JSON.
heads() {
    python3 - "$1" <<'PY'
import json, sys; sys.path.insert(0, "benches"); import rcp1
c = rcp1.Conn(sys.argv[1])
print(json.dumps([s["wal_offset"] for s in c.call("INFO", {})["shard_details"]]))
PY
}

# Whether every shard's archive holds a segment reaching its head.
archived() { # archive dir, heads JSON
    python3 - "$1" "$2" <<'PY'
import json, os, sys
arch, heads = sys.argv[1], json.loads(sys.argv[2])
for shard, head in enumerate(heads):
    d = os.path.join(arch, f"shard-{shard}")
    lasts = [int(n.split("-")[1]) for n in os.listdir(d) if n.endswith(".seg")] if os.path.isdir(d) else []
    if max(lasts, default=0) < head:
        sys.exit(1)
PY
}

start() { # config, stdout file; sets PID
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

port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d "$DATA_PARENT/smdb-restorebench-XXXXXX")
cat >"$dir/smdb.toml" <<CFG
[network]
bind_addr = "127.0.0.1:$port"
[storage]
data_dir = "$dir/data"
segment_bytes = $SEGMENT_BYTES
archive_dir = "$dir/archive"
archive_timeout_ms = 1000
[metrics]
enabled = false
CFG
start "$dir/smdb.toml" "$OUT/server.out"
addr="127.0.0.1:$port"
"$CLI" --addr "$addr" backup --out "$dir/backup" >"$OUT/backup.out" 2>&1
"$BENCH" --addr "$addr" --server-pid "$PID" --workload apply -c 16 --in-flight 8 \
    --instances "$INSTANCES" --duration "$DURATION" --warmup 2 --json \
    >"$OUT/bench.json" 2>"$OUT/bench.err"
h=$(heads "$addr")
until archived "$dir/archive" "$h"; do sleep 0.5; done
kill -9 "$PID"
wait "$PID" 2>/dev/null || true
if [ "$DROP_CACHES" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; fi
r0=$(date +%s.%N)
"$SERVER" restore --backup "$dir/backup" --archive "$dir/archive" --data-dir "$dir/restored" \
    >"$OUT/restore.out" 2>"$OUT/restore.err"
r1=$(date +%s.%N)
sed -e "s#$dir/data#$dir/restored#" -e '/archive/d' "$dir/smdb.toml" >"$dir/restored.toml"
s0=$(date +%s.%N)
start "$dir/restored.toml" "$OUT/restored.out"
s1=$(date +%s.%N)
got=$(heads "$addr")
kill -9 "$PID" 2>/dev/null || true
wait "$PID" 2>/dev/null || true
bytes=$(du -sb "$dir/archive" | cut -f1)
python3 - "$h" "$got" "$r0" "$r1" "$s0" "$s1" "$bytes" <<'PY' | tee "$OUT/summary"
import json, sys
want, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
r0, r1, s0, s1, size = map(float, sys.argv[3:])
n = sum(want)
print(f"restore of {n:,} entries ({size / 1e6:.0f} MB archived) in {r1 - r0:.2f} s: "
      f"{n / (r1 - r0):,.0f} entries/s; a server on it listens after {s1 - s0:.2f} s; "
      f"heads {'equal' if want == got else f'DIFFER: {want} vs {got}'}")
PY
cat "$OUT/restore.out" | sed 's/^/  /'
rm -rf "$dir"
echo "results in $OUT"
