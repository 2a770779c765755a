#!/usr/bin/env bash
# benches/clients-1x8.sh: issue 18's figures, APPLY_EVENT with 8 in flight on one connection
# from smdb-bench, the Rust async client (clients/rust/examples/async_bench.rs) and the Python
# asyncio client (clients/python/examples/bench.py). Each round starts a fresh server (release
# build, storage.fsync = always), runs smdb-bench and the Rust client in alternating order
# (odd rounds bench first), then the Python client, SECONDS each. One line per round.
#
#   benches/clients-1x8.sh [ROUNDS] [SECONDS]   (defaults: 6 rounds of 4 s)
#   PY=/path/to/python    an interpreter with the smdb package installed
#                         (pip install ./clients/python; default python3; "" skips Python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-6}
SECS=${2:-4}
PY=${PY-python3}
cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
cargo build --release --quiet -p smdb-client --features tokio --example async_bench
T=${CARGO_TARGET_DIR:-target}/release
PORT=${PORT:-7611}
for r in $(seq 1 "$ROUNDS"); do
    dir=$(mktemp -d)
    printf '[network]\nbind_addr = "127.0.0.1:%s"\n[storage]\ndata_dir = "%s/data"\n[metrics]\nenabled = false\n[http]\nenabled = false\n' \
        "$PORT" "$dir" >"$dir/smdb.toml"
    "$T/smdb-server" --config "$dir/smdb.toml" >"$dir/log" 2>&1 &
    server=$!
    sleep 1
    bench() {
        "$T/smdb-bench" --addr "127.0.0.1:$PORT" --workload apply -c 1 --in-flight 8 \
            --duration "$SECS" --warmup 1 | sed -n 's/^ops .*= \([0-9,]*\) ops\/s.*/\1/p' | tr -d ,
    }
    rust() {
        "$T/examples/async_bench" "127.0.0.1:$PORT" "$SECS" 8 | grep -o '[0-9]* ops/s' | head -1 | cut -d' ' -f1
    }
    if [ $((r % 2)) = 1 ]; then b=$(bench); rs=$(rust); else rs=$(rust); b=$(bench); fi
    py=0
    if [ -n "$PY" ]; then
        py=$("$PY" clients/python/examples/bench.py "127.0.0.1:$PORT" "$SECS" 8 | grep -o '[0-9]* ops/s' | head -1 | cut -d' ' -f1)
    fi
    kill "$server"
    wait "$server" 2>/dev/null || true
    rm -rf "$dir"
    python3 -c "b, r, p = $b, $rs, $py; print(f'round $r: smdb-bench {b} rust {r} ({(r / b - 1) * 100:+.1f}%) python {p}')"
done
