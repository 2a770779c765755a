#!/usr/bin/env bash
# benches/cluster-cost.sh: what cluster mode costs a routing client (issue 51). APPLY_EVENT
# 16 connections x 8 in flight from `smdb-bench --cluster` (routes by slot, as smdb-client
# does: docs/cluster.md "Clients") against these arms, alternated round by round, the order
# reversed every other round (A/B/C, C/B/A, A/B/C, ...: no arm always runs first), each run on
# fresh servers and data dirs, one etcd for all:
#
#   group     one failover group of one member (`[ha]` on, no `[cluster]`): the seed's HELLO
#             has no "cluster", so the client sends everything to it (the baseline)
#   cluster1  a cluster of that one group (`[cluster]` on, CLUSTER_CREATE: it owns every slot):
#             the client routes by slot, the server checks each op's slot; what is measured is
#             routing on both sides
#   cluster3  a cluster of three groups of one member each on the same host; each connection
#             holds a socket per primary. On a 2-core host the three members share the cores:
#             this shows the cost of sharing, not scaling (benches/cluster-scale.sh)
#
# One line per round, then each arm's median ratio to `group` over the rounds:
#   round 1: group=<ops/s> cluster1=<ops/s> (<ratio>) cluster3=<ops/s> (<ratio>)
#
#   benches/cluster-cost.sh [ROUNDS] [SECONDS]   (defaults: 5 rounds of 10 s after 2 s warm-up)
#   ARMS="group cluster1"                        the arms, in each round's order
#   BIN=/path/to/dir                             smdb-server, smdb-bench, smdb-cli of a build
#                                                (default: cargo build --release first)
#   STORAGE='fsync = "never"'                    extra [storage] lines for every member
#   NETWORK='fronts_on_shards = true'            extra [network] lines for every member
#   SHAPE="-c 16 --in-flight 8"                  smdb-bench's connections and in-flight
#   OUT=file.jsonl                               keep every run's smdb-bench --json line
#
# Needs etcd (Debian etcd-server) and curl. Run on a quiet machine; every process and temp dir
# is removed on exit. The one-member arms also print the server's CPU per op (all its threads,
# from /proc) and `other_cores` (CPU used by anything but the server and the load generator;
# above 0.10 the run was disturbed), whose ratio varies far less than ops/s on a shared host.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-10}
WARMUP=${WARMUP:-2}
ARMS=${ARMS:-group cluster1 cluster3}
SHAPE=${SHAPE:--c 16 --in-flight 8}
# shellcheck source=benches/cluster-lib.sh
. benches/cluster-lib.sh
cl_build
cl_start_etcd

# run ARM: start the arm's members, load them, stop them; prints "<ops/s> <µs CPU/op|->".
run() {
    local arm=$1 members=() seed pid_arg=() m
    cl_new_cluster
    case $arm in
    group) cl_start a0 group:g1 "" "${NETWORK:-}" && members=(a0) ;;
    cluster1) cl_start a0 cluster:g1 "" "${NETWORK:-}" && members=(a0) ;;
    cluster3)
        for g in 1 2 3; do cl_start "a$g" "cluster:g$g" "" "${NETWORK:-}"; done
        members=(a1 a2 a3)
        ;;
    *) echo "unknown arm $arm" >&2 && return 1 ;;
    esac
    for m in "${members[@]}"; do cl_wait_ready "$m"; done
    [ "$arm" != group ] && cl_create_map "${members[0]}" "${members[@]}"
    seed=PORT_${members[0]}
    if [ "${#members[@]}" = 1 ]; then
        local p=PID_${members[0]}
        pid_arg=(--server-pid "${!p}")
    fi
    # shellcheck disable=SC2086
    "$BIN/smdb-bench" --cluster --addr "127.0.0.1:${!seed}" "${pid_arg[@]}" -w apply $SHAPE \
        --duration "$SECS" --warmup "$WARMUP" --json --label "$arm" >"$work/run.json"
    cl_stop "${members[@]}"
    [ -n "${OUT:-}" ] && cat "$work/run.json" >>"$OUT"
    python3 - "$work/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ops, cores = r["ops_per_sec"], r["cpu"]["server_cores"]
if r["errors_total"]:
    print(f"errors in the window: {r['errors']}", file=sys.stderr)
cpu = f"{cores * 1e6 / max(ops, 1):.2f}" if cores is not None else "-"
other = r["cpu"]["other_cores"]
print(round(ops), cpu, r.get("cluster_groups", 0), "-" if other is None else f"{other:.2f}")
PY
}

declare -A all cpus
reversed=$(tr ' ' '\n' <<<"$ARMS" | tac | tr '\n' ' ')
for i in $(seq 1 "$ROUNDS"); do
    order=$ARMS
    [ $((i % 2)) = 0 ] && order=$reversed
    line="round $i (load $(cut -d' ' -f1 /proc/loadavg)):"
    declare -A got=()
    for arm in $order; do
        read -r ops cpu groups other < <(run "$arm")
        all[$arm]="${all[$arm]:-} $ops"
        cpus[$arm]="${cpus[$arm]:-} $cpu"
        got[$arm]="$ops cpu_us_per_op=$cpu other_cores=$other groups=$groups"
    done
    base=${got[group]%% *}
    for arm in $ARMS; do
        ops=${got[$arm]%% *} ratio=
        if [ -n "$base" ] && [ "$arm" != group ]; then
            ratio=" ($(python3 -c "print(f'{$ops / $base:.3f}')"))"
        fi
        line+=" $arm=$ops$ratio ${got[$arm]#* }"
    done
    echo "$line (order: $order)"
done
python3 - "${all[group]:-}" "${cpus[group]:-}" \
    "$(for a in $ARMS; do echo "$a:${all[$a]}:${cpus[$a]}"; done)" <<'PY'
import statistics, sys
base = [float(x) for x in sys.argv[1].split()]
base_cpu = sys.argv[2].split()
for row in sys.argv[3].splitlines():
    arm, vals, cpu = row.split(":")
    v = [float(x) for x in vals.split()]
    line = f"{arm}: median {statistics.median(v):,.0f} ops/s (min {min(v):,.0f}, max {max(v):,.0f})"
    if base and arm != "group":
        r = sorted(a / b for a, b in zip(v, base))
        line += f"; ratio to group per round: median {statistics.median(r):.3f} " \
                f"(spread {r[0]:.3f} .. {r[-1]:.3f}, {len(r)} rounds)"
        c = sorted(float(a) / float(b) for a, b in zip(cpu.split(), base_cpu)
                   if a != "-" and b != "-")
        if c:
            line += f"; server CPU per op ratio: median {statistics.median(c):.3f} " \
                    f"(spread {c[0]:.3f} .. {c[-1]:.3f})"
    print(line)
PY
