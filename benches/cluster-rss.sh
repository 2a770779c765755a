#!/usr/bin/env bash
# benches/cluster-rss.sh: resident memory of a cluster's groups against one server holding the
# same instances (issue 51). Two arms, each on fresh servers and data dirs:
#
#   standalone  one server without failover or cluster mode
#   cluster3    three groups of ONE member each (no followers), one etcd, CLUSTER_CREATE
#               (g1 0-5460, g2 5461-10922, g3 10923-16383)
#
# Each arm: start, settle, read every server's VmRSS (/proc/<pid>/status: the empty baseline),
# pre-create INSTANCES instances with `smdb-bench [--cluster]` (APPLY_EVENT's bench machine,
# context {"p": "<64 x>"}, no events; --cluster sends each create to its slot's primary), settle
# again, read VmRSS. Snapshots are pushed out of the way (snapshot_every_entries above the
# instance count) so that no arm is caught writing one. Prints one line per server:
#   standalone s0 empty=<bytes> loaded=<bytes> per_instance=<bytes> instances=<n>
#   cluster3 g1 empty=.. loaded=.. per_instance=.. instances=<n> vs_third=<loaded / (standalone/3)>
# and the goal's check: each group's loaded RSS within a third of the standalone's +- 15%.
#
#   benches/cluster-rss.sh [INSTANCES] [SETTLE_SECONDS]    (defaults: 1000000, 5)
#   BIN=/path/to/dir                  smdb-server, smdb-bench, smdb-cli of a build
#   STORAGE='...'                     extra [storage] lines (default: fsync never, no snapshot)
#
# Needs etcd and curl. Every process and temp dir is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTANCES=${1:-1000000}
SETTLE=${2:-5}
STORAGE=${STORAGE:-$(printf 'fsync = "never"\nsnapshot_every_entries = %s' $((INSTANCES * 4 + 1000000)))}
# shellcheck source=benches/cluster-lib.sh
. benches/cluster-lib.sh
cl_build
cl_start_etcd
cl_new_cluster

# instances_of MEMBER: INFO's instance count (every shard's).
instances_of() {
    local p=PORT_$1
    "$BIN/smdb-cli" --addr "127.0.0.1:${!p}" --json info 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["instances"])' || echo "?"
}

# fill ARM MEMBER..: measure empty, load, measure loaded; one line per member.
fill() {
    local arm=$1 m p cluster_flag=()
    shift
    [ "$arm" = cluster3 ] && cluster_flag=(--cluster)
    sleep "$SETTLE"
    for m in "$@"; do
        p=PID_$m
        printf -v "EMPTY_$m" '%s' "$(cl_rss "${!p}")"
    done
    local seed=PORT_$1 started=$SECONDS
    "$BIN/smdb-bench" "${cluster_flag[@]}" --addr "127.0.0.1:${!seed}" -w get -c 2 --in-flight 1 \
        --instances "$INSTANCES" --duration 0.5 --warmup 0 --json >"$work/$arm.json"
    echo "$arm: pre-created $INSTANCES instances in $((SECONDS - started)) s" >&2
    sleep "$SETTLE"
    for m in "$@"; do
        p=PID_$m
        local empty=EMPTY_$m loaded
        loaded=$(cl_rss "${!p}")
        printf -v "LOADED_$m" '%s' "$loaded"
        printf -v "HELD_$m" '%s' "$(instances_of "$m")"
        local held=HELD_$m
        echo "$arm $m empty=${!empty} loaded=$loaded instances=${!held}"
    done
}

cl_start s0 standalone
cl_wait_ready s0
fill standalone s0
cl_stop s0

for g in 1 2 3; do cl_start "g$g" "cluster:g$g"; done
for g in 1 2 3; do cl_wait_ready "g$g"; done
cl_create_map g1 g1 g2 g3
fill cluster3 g1 g2 g3
cl_stop g1 g2 g3

python3 - "$INSTANCES" "$EMPTY_s0" "$LOADED_s0" \
    "$EMPTY_g1" "$LOADED_g1" "$EMPTY_g2" "$LOADED_g2" "$EMPTY_g3" "$LOADED_g3" \
    "$HELD_g1" "$HELD_g2" "$HELD_g3" <<'PY'
import sys
n = int(sys.argv[1])
e0, l0 = int(sys.argv[2]), int(sys.argv[3])
held = [int(x) if x.isdigit() else 0 for x in sys.argv[10:13]]
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"standalone: empty {mib(e0)}, with {n:,} instances {mib(l0)}: "
      f"{(l0 - e0) / n:.0f} bytes per instance above the empty server")
third = l0 / 3
ok = True
pairs = zip(map(int, sys.argv[4:10:2]), map(int, sys.argv[5:10:2]), held)
for g, (e, l, h) in enumerate(pairs, 1):
    r = l / third
    ok &= abs(r - 1) <= 0.15
    per = f"{(l - e) / h:.0f} bytes per instance" if h else "instances unknown"
    print(f"g{g}: {h:,} instances; empty {mib(e)}, loaded {mib(l)} (+{mib(l - e)}: {per}); "
          f"{r:.3f} x a third of the standalone's {mib(third)}")
print(f"goal (each group a third of the standalone +- 15%): {'met' if ok else 'NOT met'}")
PY
