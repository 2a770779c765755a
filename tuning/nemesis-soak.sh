#!/usr/bin/env bash
# The nemesis soak (issue 48, tests/nemesis.rs `soak`): three hosts in network namespaces, each
# running an etcd member and an smdb member, random faults (partitions, one-way links, cuts from
# etcd or from the replicas, a bridge partition, 30% packet loss, flapping etcd cuts, SIGKILL and
# SIGSTOP of random members) for MINUTES, one fault per round with fresh instances, the history
# checker run per round. Reproducible by SEED (printed at start). Needs root (namespaces,
# nftables) and the Debian packages etcd-server, etcd-client, nftables.
#   tuning/nemesis-soak.sh [minutes=5] [seed=random] [mode=sync|async]
# SOAK_PROFILE=debug uses the test build (`cargo test`'s profile; no release build, which takes
# about 10 minutes on 2 cores); the default is release. NEMESIS_FAULT=stop_0:9s repeats one fault
# (only the rounds whose name starts with it run).
# Prints each round as it ends and a summary table at the end; exits non-zero if a round failed.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-5}
SEED=${2:-}
MODE=${3:-sync}
[ "$(id -u)" = 0 ] || { echo "nemesis-soak: needs root (network namespaces, nftables)" >&2; exit 2; }
log=$(mktemp /tmp/nemesis-soak.XXXXXX.log)
profile=(--release)
[ "${SOAK_PROFILE:-release}" = debug ] && profile=()
cargo build -q "${profile[@]}" --locked --bin smdb-server
cargo test -q "${profile[@]}" --locked --test nemesis --no-run
echo "== nemesis soak: $MINUTES min, mode $MODE, seed ${SEED:-random}; full output in $log"
rc=0
NEMESIS_MINUTES=$MINUTES NEMESIS_SEED=$SEED NEMESIS_MODE=$MODE \
  cargo test -q "${profile[@]}" --locked --test nemesis -- --ignored --nocapture --exact soak \
  >"$log" 2>&1 || rc=$?
grep -E '^soak: NEMESIS_SEED' "$log" || true
echo
echo "round | fault:seconds | result | time without a primary | checker"
grep -E '^soak \| +[0-9]+ \|' "$log" | sed -E 's/^soak \| +//' || true
echo
grep -E '^(test result|thread|  (lost|duplicate|phantom|order violation|bad read|backwards read|split term|divergent members) )' "$log" | head -40 || true
[ "$rc" = 0 ] && echo "nemesis soak: every round clean" || echo "nemesis soak: FAILED (see $log)"
exit "$rc"
