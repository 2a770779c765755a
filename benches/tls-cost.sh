#!/usr/bin/env bash
# benches/tls-cost.sh: what TLS costs, as in benches/RESULTS.md "TLS cost".
#
# Makes a throwaway CA and server certificate (openssl), then alternates plain and TLS runs of
# APPLY_EVENT 16x8 and GET_INSTANCE 16x8 against servers spawned from the same binary (a TLS
# server is the same spawn with a --server-config holding [tls]). Alternating spreads the noise
# of a shared machine over both sides. Prints a markdown table (median per label) and keeps the
# raw JSON under $OUT.
#
# Environment: DURATION=10 WARMUP=2 REPEAT=3 FSYNC=always OUT=target/bench-results/tls-<time>
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
REPEAT=${REPEAT:-3}
FSYNC=${FSYNC:-always}
TARGET=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$TARGET/bench-results/tls-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

echo "building release binaries..." >&2
cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
BENCH="$TARGET/release/smdb-bench"

PKI="$OUT/pki"
mkdir -p "$PKI"
(
    cd "$PKI"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
        -subj "/CN=bench CA" -keyout ca.key -out ca.pem \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=localhost" -keyout server.key -out server.csr
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
        -extfile server.ext -out server.pem
) 2>/dev/null
printf '[tls]\nenabled = true\ncert_path = "%s"\nkey_path = "%s"\n' \
    "$PKI/server.pem" "$PKI/server.key" >"$PKI/tls.toml"

RAW="$OUT/tls.jsonl"
for i in $(seq 1 "$REPEAT"); do
    for w in apply get; do
        echo "  $w 16x8 plain, then tls (run $i/$REPEAT)" >&2
        common=(--spawn --fsync "$FSYNC" --duration "$DURATION" --warmup "$WARMUP" --json
            --workload "$w" -c 16 --in-flight 8)
        "$BENCH" "${common[@]}" --label "$w 16x8 plain" >>"$RAW"
        "$BENCH" "${common[@]}" --label "$w 16x8 tls" --server-config "$PKI/tls.toml" \
            --ca "$PKI/ca.pem" >>"$RAW"
    done
done
"$BENCH" --report "$RAW" | tee "$OUT/report.md"
