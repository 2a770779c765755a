#!/usr/bin/env bash
# benches/ha-cost.sh: what failover costs the commit path (issue 37). One member with
# `[ha] enabled = true` (a one-member cluster: it wins the election, then every append and
# every reply release checks its lease deadline) against the same member with failover off,
# etcd running in both arms, APPLY_EVENT 16 connections x 8 in flight, alternated pairs
# (off, on), a fresh data dir each run. One line per pair, then the median ratio and spread:
#   pair 1: off=<ops/s> on=<ops/s> ratio=<on/off>
#
#   benches/ha-cost.sh [PAIRS] [SECONDS]     (defaults: 5 pairs of 10 s after 2 s warm-up)
#   BIN=/path/to/dir benches/ha-cost.sh      smdb-bench and smdb-server from another build
#   STORAGE='fsync = "never"' benches/ha-cost.sh   extra [storage] lines in both arms: with
#                                            the disk out of the commit path the runs are
#                                            CPU-bound, so the pairs measure the HA arm's own
#                                            cost without the disk's noise
# Each pair also prints the server's CPU per op in both arms (microseconds of all its threads
# per APPLY_EVENT, from /proc), whose ratio varies far less than throughput on a shared disk.
#
# Needs etcd (Debian etcd-server). Run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-5}
SECS=${2:-10}
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench
    BIN=${CARGO_TARGET_DIR:-target}/release
fi
ETCD=${ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
work=$(mktemp -d /tmp/smdb-ha-cost.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

ec=$(free_port) ep=$(free_port)
"$ETCD" --name e0 --data-dir "$work/etcd" \
    --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
    --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
    --initial-cluster "e0=http://127.0.0.1:$ep" >"$work/etcd.log" 2>&1 &
pids+=($!)
disown
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$ec/health" >/dev/null && break
    sleep 0.1
done

# One run: start the server on fixed ports, wait until it takes writes, load it, stop it.
run() {
    local arm=$1 run_dir port mport cfg pid rate
    run_dir=$(mktemp -d "$work/run.XXXX")
    port=$(free_port) mport=$(free_port)
    cfg="$run_dir/smdb.toml"
    printf '[network]\nbind_addr = "127.0.0.1:%s"\n[storage]\ndata_dir = "%s/data"\n' \
        "$port" "$run_dir" >"$cfg"
    [ -n "${STORAGE:-}" ] && printf '%s\n' "$STORAGE" >>"$cfg"
    printf '[metrics]\nbind_addr = "127.0.0.1:%s"\n[http]\nenabled = false\n' "$mport" >>"$cfg"
    printf '[logging]\nlevel = "warn"\n' >>"$cfg"
    if [ "$arm" = on ]; then
        printf '[ha]\nenabled = true\nnode_id = "n0"\ncluster = "cost-%s"\n' \
            "$(basename "$run_dir")" >>"$cfg"
        printf 'etcd_endpoints = ["127.0.0.1:%s"]\nttl_ms = 3000\n' "$ec" >>"$cfg"
    fi
    "$BIN/smdb-server" --config "$cfg" >"$run_dir/out" 2>"$run_dir/log" &
    pid=$!
    pids+=("$pid")
    local health=/health
    [ "$arm" = on ] && health=/health/primary
    for _ in $(seq 1 200); do
        curl -sf "http://127.0.0.1:$mport$health" >/dev/null && break
        sleep 0.05
    done
    rate=$("$BIN/smdb-bench" --addr "127.0.0.1:$port" --server-pid "$pid" -w apply -c 16 \
        --in-flight 8 --duration "$SECS" --warmup 2 --json |
        python3 -c 'import json, sys
r = json.load(sys.stdin)
ops, cores = r["ops_per_sec"], r["cpu"]["server_cores"] or 0
print(round(ops), round(cores * 1e6 / max(ops, 1), 2))')
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$run_dir"
    echo "$rate"
}

ratios=() cpu_ratios=()
for i in $(seq 1 "$PAIRS"); do
    read -r off off_cpu < <(run off)
    read -r on on_cpu < <(run on)
    r=$(python3 -c "print(f'{$on / $off:.3f}')")
    c=$(python3 -c "print(f'{$on_cpu / max($off_cpu, 1e-9):.3f}')")
    ratios+=("$r")
    cpu_ratios+=("$c")
    echo "pair $i: off=$off on=$on ratio=$r cpu_us_per_op off=$off_cpu on=$on_cpu ratio=$c"
done
python3 - "${ratios[*]}" "${cpu_ratios[*]}" <<'PY'
import statistics, sys
for name, arg in (("ops/s", sys.argv[1]), ("server CPU per op", sys.argv[2])):
    r = sorted(float(x) for x in arg.split())
    print(f"median ratio on/off, {name}: {statistics.median(r):.3f} "
          f"(spread {r[0]:.3f} .. {r[-1]:.3f}, {len(r)} pairs)")
PY
