# benches/cluster-lib.sh: shared by benches/cluster-cost.sh, cluster-rss.sh and cluster-scale.sh
# (sourced, not run). A one-member etcd on a free loopback port and smdb members of one
# cluster on 127.0.0.1, every process and temp dir removed on exit (the trap is set here).
#
# Expects: set -euo pipefail; BIN (dir of smdb-server, smdb-bench, smdb-cli) or cl_build.
# Gives:
#   cl_build                             a release build into BIN unless BIN is set
#   cl_start_etcd                        etcd in $work/etcd; sets ETCD_PORT
#   cl_start MEMBER KIND [TOML] [NET]    start a server: KIND standalone (no failover),
#                                        group:<G> (a failover group of one member, no
#                                        [cluster]) or cluster:<G> (a member of cluster
#                                        $CLUSTER, group G); extra TOML lines appended, extra
#                                        [network] lines in NET.
#                                        Sets PORT_<MEMBER>, MPORT_<MEMBER>, PID_<MEMBER>
#   cl_wait_ready MEMBER                 /health (standalone) or /health/primary (others)
#   cl_create_map SEED MEMBER..          CLUSTER_CREATE on SEED, then wait until every member
#                                        has the map (smdb-cli cluster check exits 0)
#   cl_stop MEMBER..                     SIGKILL the members and remove their data dirs
#   cl_rss PID                           VmRSS of PID in bytes
# STORAGE: extra [storage] lines for every server (e.g. 'fsync = "never"').
# CLUSTER is a fresh cluster name per call of cl_new_cluster (each run its own etcd prefix).

cl_build() {
    if [ -z "${BIN:-}" ]; then
        cargo build --release --quiet -p smdb -p smdb-bench -p smdb-cli \
            --bin smdb-server --bin smdb-bench --bin smdb-cli
        BIN=${CARGO_TARGET_DIR:-target}/release
    fi
}

# A failing step inside `$(..)` or `< <(..)` ends that subshell too.
shopt -s inherit_errexit
ETCD=${ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
work=$(mktemp -d /tmp/smdb-cluster-bench.XXXXXX)
# Every pid started, one a line: runs started in a subshell (`< <(run ..)`) add theirs too.
: >"$work/pids"
cl_cleanup() {
    local p
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$work/pids"
    while read -r p; do
        for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break && sleep 0.05; done
    done <"$work/pids"
    rm -rf "$work"
}
trap cl_cleanup EXIT
trap 'exit 130' INT TERM

cl_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

cl_start_etcd() {
    local ep
    ETCD_PORT=$(cl_free_port) ep=$(cl_free_port)
    "$ETCD" --name e0 --data-dir "$work/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
        --initial-cluster "e0=http://127.0.0.1:$ep" >"$work/etcd.log" 2>&1 &
    echo $! >>"$work/pids"
    disown # killed at exit only; no job notice then
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null && return 0
        sleep 0.1
    done
    echo "etcd did not start: $(tail -5 "$work/etcd.log")" >&2
    return 1
}

cl_new_cluster() { CLUSTER="bench-$RANDOM$RANDOM"; }

cl_start() {
    local m=$1 kind=$2 extra=${3:-} net=${4:-} port mport cfg dir
    dir="$work/$m"
    rm -rf "$dir"
    mkdir -p "$dir"
    port=$(cl_free_port) mport=$(cl_free_port)
    cfg="$dir/smdb.toml"
    {
        printf '[network]\nbind_addr = "127.0.0.1:%s"\n' "$port"
        if [ -n "$net" ]; then printf '%s\n' "$net"; fi
        printf '[storage]\ndata_dir = "%s/data"\n' "$dir"
        if [ -n "${STORAGE:-}" ]; then printf '%s\n' "$STORAGE"; fi
        printf '[metrics]\nbind_addr = "127.0.0.1:%s"\n[http]\nenabled = false\n' "$mport"
        printf '[logging]\nlevel = "warn"\n'
        case $kind in
        standalone) ;;
        group:* | cluster:*)
            printf '[ha]\nenabled = true\nnode_id = "%s"\ncluster = "%s"\n' "$m" "$CLUSTER"
            printf 'etcd_endpoints = ["127.0.0.1:%s"]\nttl_ms = 3000\n' "$ETCD_PORT"
            ;;
        *) echo "cl_start: unknown kind $kind" >&2 && return 1 ;;
        esac
        case $kind in
        cluster:*) printf '[cluster]\nenabled = true\ngroup = "%s"\n' "${kind#cluster:}" ;;
        esac
        if [ -n "$extra" ]; then printf '%s\n' "$extra"; fi
    } >"$cfg"
    "$BIN/smdb-server" --config "$cfg" >"$dir/out" 2>"$dir/log" &
    local pid=$!
    echo "$pid" >>"$work/pids"
    printf -v "PORT_$m" '%s' "$port"
    printf -v "MPORT_$m" '%s' "$mport"
    printf -v "PID_$m" '%s' "$pid"
    printf -v "KIND_$m" '%s' "$kind"
}

cl_wait_ready() {
    local m=$1 mport kind health=/health/primary
    mport=MPORT_$m kind=KIND_$m
    [ "${!kind}" = standalone ] && health=/health
    for _ in $(seq 1 400); do
        curl -sf "http://127.0.0.1:${!mport}$health" >/dev/null && return 0
        sleep 0.05
    done
    echo "$m did not become ready: $(tail -5 "$work/$m/log")" >&2
    return 1
}

cl_create_map() {
    local seed=$1 port
    shift
    port=PORT_$seed
    "$BIN/smdb-cli" --addr "127.0.0.1:${!port}" cluster create >/dev/null
    local m p
    for m in "$@"; do
        p=PORT_$m
        for _ in $(seq 1 200); do
            "$BIN/smdb-cli" --addr "127.0.0.1:${!p}" cluster check >/dev/null 2>&1 && break
            sleep 0.05
        done
    done
}

cl_stop() {
    local m pid
    for m in "$@"; do
        pid=PID_$m
        kill -9 "${!pid}" 2>/dev/null || true
        wait "${!pid}" 2>/dev/null || true
        rm -rf "${work:?}/$m"
    done
}

cl_rss() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$1/status"; }
