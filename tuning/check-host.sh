#!/usr/bin/env bash
# check-host.sh: is this host ready for smdb, and how should shards be placed on it?
#
# Reads /proc and /sys only (plus coreutils, and perl or python3 for the io_uring probe when
# present); needs no root and changes nothing. Every section degrades to a note when what it
# reads is missing (containers, VMs, minimal images). See tuning/README.md for the why.
#
# Usage: tuning/check-host.sh [--data-dir DIR] [--shards N] [--acceptor-cores N]
#                             [--io-memory BYTES] [--strict]
#   --data-dir        storage.data_dir to inspect (default: ./data, or its nearest existing parent)
#   --shards          planned shards.count (default: recommended below)
#   --acceptor-cores  planned network.acceptor_cores (default 1)
#   --io-memory       planned shards.io_memory_bytes (default 2097152)
#   --strict          exit 1 when any check FAILs (default: always exit 0, report only)

set -u
export LC_ALL=C

DATA_DIR=./data
SHARDS=
ACCEPTORS=1
IO_MEMORY=$((2 * 1024 * 1024))
STRICT=0

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --data-dir) DATA_DIR=${2:?--data-dir needs a value}; shift 2 ;;
        --shards) SHARDS=${2:?--shards needs a value}; shift 2 ;;
        --acceptor-cores) ACCEPTORS=${2:?--acceptor-cores needs a value}; shift 2 ;;
        --io-memory) IO_MEMORY=${2:?--io-memory needs a value}; shift 2 ;;
        --strict) STRICT=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "check-host.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
for v in "$ACCEPTORS" "$IO_MEMORY" ${SHARDS:+"$SHARDS"}; do
    case "$v" in ''|*[!0-9]*) echo "check-host.sh: not a number: $v" >&2; exit 2 ;; esac
done

N_OK=0 N_WARN=0 N_FAIL=0
ok()   { N_OK=$((N_OK + 1));     echo "  OK    $*"; }
warn() { N_WARN=$((N_WARN + 1)); echo "  WARN  $*"; }
fail() { N_FAIL=$((N_FAIL + 1)); echo "  FAIL  $*"; }
info() { echo "  INFO  $*"; }
section() { echo; echo "== $* =="; }
readf() { [ -r "$1" ] && cat "$1" 2>/dev/null; }

# Expands a CPU list like "0-3,8,10-11" to one number per line.
expand_list() {
    local part a b
    local IFS=,
    for part in $1; do
        case "$part" in
            *-*) a=${part%-*}; b=${part#*-}; seq "$a" "$b" ;;
            '') ;;
            *) echo "$part" ;;
        esac
    done
}
# Joins lines with commas.
join_list() { paste -sd, -; }

# --- planning (silent): the CPUs, where fronts go, which cores shards should get ---------
ONLINE=$(readf /sys/devices/system/cpu/online)
[ -n "$ONLINE" ] || ONLINE="0-$(( $(nproc 2>/dev/null || echo 1) - 1 ))"
mapfile -t CPUS < <(expand_list "$ONLINE")
CMDLINE=$(readf /proc/cmdline)
ISOL=$(echo "$CMDLINE" | tr ' ' '\n' | sed -n 's/^isolcpus=//p' | tail -1)
NOHZ=$(echo "$CMDLINE" | tr ' ' '\n' | sed -n 's/^nohz_full=//p' | tail -1)
# isolcpus may start with flags ("domain,managed_irq,2-7"): keep the CPU part.
ISOL_CPUS=$(echo "$ISOL" | tr ',' '\n' | grep -E '^[0-9]' | paste -sd, -)
FRONTS=()
for ((i = 0; i < ACCEPTORS && i < ${#CPUS[@]}; i++)); do FRONTS+=("${CPUS[$i]}"); done
[ ${#FRONTS[@]} -gt 0 ] || FRONTS=(0)
if [ -n "$ISOL_CPUS" ]; then
    mapfile -t CANDIDATES < <(expand_list "$ISOL_CPUS")
else
    CANDIDATES=("${CPUS[@]}")
fi
is_front() { local f; for f in "${FRONTS[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
core_key() {
    local t=/sys/devices/system/cpu/cpu$1/topology
    echo "$(readf "$t/physical_package_id")-$(readf "$t/core_id")"
}
declare -A USED=()
for f in "${FRONTS[@]}"; do USED[$(core_key "$f")]=1; done
PRIMARY=() SECONDARY=()
for c in "${CANDIDATES[@]}"; do
    is_front "$c" && continue
    k=$(core_key "$c")
    if [ "$k" = "-" ] || [ -z "${USED[$k]:-}" ]; then
        PRIMARY+=("$c"); [ "$k" = "-" ] || USED[$k]=1
    else
        SECONDARY+=("$c")
    fi
done
PICK=("${PRIMARY[@]}")
[ ${#PICK[@]} -gt 0 ] || PICK=("${SECONDARY[@]}")
[ ${#PICK[@]} -gt 0 ] || PICK=("${FRONTS[0]}")
if [ -n "$SHARDS" ] && [ "$SHARDS" -gt 0 ]; then
    N=$SHARDS
else
    N=${#PICK[@]}
fi
SHARD_CORES=()
for ((i = 0; i < N; i++)); do SHARD_CORES+=("${PICK[$((i % ${#PICK[@]}))]}"); done
EXECUTORS=$((N + ACCEPTORS + 1))
NEED_KIB=$(( (EXECUTORS * 3 * IO_MEMORY + 1024 * 1024 + 1023) / 1024 ))
NEED_MIB=$(( (NEED_KIB + 1023) / 1024 ))

echo "smdb host check ($(hostname 2>/dev/null || echo unknown-host), $(date -u +%Y-%m-%dT%H:%M:%SZ))"

# --- kernel -------------------------------------------------------------------------------
section "kernel"
KERNEL=$(uname -r)
KMAJ=${KERNEL%%.*}; KREST=${KERNEL#*.}; KMIN=${KREST%%[!0-9]*}
info "Linux $KERNEL ($(uname -m))"
if [ "$KMAJ" -gt 5 ] || { [ "$KMAJ" -eq 5 ] && [ "${KMIN:-0}" -ge 8 ]; }; then
    if [ "$KMAJ" -ge 6 ]; then ok "kernel >= 6.0 (glommio wants >= 5.8; 6.x recommended)"
    else warn "kernel $KERNEL works (>= 5.8) but 6.x is recommended for io_uring fixes"; fi
else
    fail "kernel $KERNEL is older than 5.8: glommio's io_uring use will fail"
fi

# --- io_uring -----------------------------------------------------------------------------
section "io_uring"
DISABLED=$(readf /proc/sys/kernel/io_uring_disabled)
case "$DISABLED" in
    0) ok "kernel.io_uring_disabled = 0 (allowed for all)" ;;
    1) warn "kernel.io_uring_disabled = 1: only members of kernel.io_uring_group (and CAP_SYS_ADMIN) may use io_uring; set it to 0 or add the smdb user to that group" ;;
    2) fail "kernel.io_uring_disabled = 2: io_uring is off; smdb cannot run (sysctl kernel.io_uring_disabled=0)" ;;
    '') info "kernel.io_uring_disabled not present (kernel < 6.6): no sysctl switch" ;;
esac
PROBE=
if command -v perl >/dev/null 2>&1; then
    # io_uring_setup(entries=4, params) is syscall 425 on x86_64, arm64, riscv64, ppc64, s390x.
    PROBE=$(perl -e '$p = "\0" x 120; $fd = syscall(425, 4, $p);
        if ($fd < 0) { printf "errno %d %s\n", $!+0, $!; } else { print "ok\n"; }' 2>&1)
elif command -v python3 >/dev/null 2>&1; then
    PROBE=$(python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
p = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, p)
if fd < 0:
    e = ctypes.get_errno(); print("errno %d %s" % (e, os.strerror(e)))
else:
    os.close(fd); print("ok")' 2>&1)
fi
case "$(uname -m)" in x86_64|aarch64|riscv64|ppc64le|ppc64|s390x) ;; *) PROBE="skipped" ;; esac
case "$PROBE" in
    ok) ok "io_uring_setup succeeded (a live ring was created and closed)" ;;
    "errno 38"*) fail "io_uring_setup: ENOSYS: this kernel was built without io_uring" ;;
    "errno 1 "*) fail "io_uring_setup: EPERM: blocked by kernel.io_uring_disabled or a seccomp profile (Docker's default blocks io_uring: run with a profile that allows io_uring_setup/enter/register)" ;;
    "errno 12"*) fail "io_uring_setup: ENOMEM: memlock limit too low for even a small ring (see memlock)" ;;
    errno*) warn "io_uring_setup failed: ${PROBE#errno }" ;;
    skipped) info "io_uring probe skipped on $(uname -m)" ;;
    *) info "io_uring probe skipped (needs perl or python3)" ;;
esac

# --- memlock ------------------------------------------------------------------------------
section "memlock"
SOFT=$(ulimit -S -l 2>/dev/null || echo unknown)
HARD=$(ulimit -H -l 2>/dev/null || echo unknown)
info "RLIMIT_MEMLOCK of this shell: soft $SOFT, hard $HARD (KiB)"
CAPEFF=$(awk '/^CapEff:/ {print $2}' /proc/self/status 2>/dev/null)
HAS_IPC_LOCK=0
if [ -n "$CAPEFF" ] && [ $(( 0x$CAPEFF >> 14 & 1 )) -eq 1 ]; then HAS_IPC_LOCK=1; fi
check_memlock() {
    local executors=$1 need_kib=$2
    info "executors = shards + acceptor_cores + 1 control = $executors; each registers io_memory ($IO_MEMORY B) in 3 rings"
    info "need >= $executors x 3 x $IO_MEMORY B + 1 MiB slack = $need_kib KiB (per user, shared by all its processes)"
    if [ "$HAS_IPC_LOCK" -eq 1 ]; then
        ok "this shell has CAP_IPC_LOCK (root or granted): io_uring buffers are not charged to memlock"
    fi
    if [ "$SOFT" = unlimited ]; then
        ok "memlock soft limit is unlimited"
    elif [ "$SOFT" != unknown ] && [ "$SOFT" -ge "$need_kib" ]; then
        ok "memlock soft limit $SOFT KiB >= $need_kib KiB"
    elif [ "$HAS_IPC_LOCK" -eq 1 ]; then
        info "memlock $SOFT KiB < $need_kib KiB, fine while the service keeps CAP_IPC_LOCK; a non-root service needs LimitMEMLOCK=${need_kib}K or AmbientCapabilities=CAP_IPC_LOCK"
    elif [ "$SOFT" != unknown ] && [ "$SOFT" -ge 512 ]; then
        warn "memlock $SOFT KiB < $need_kib KiB: executors start, but buffer registration falls back to unregistered I/O with a warning; set LimitMEMLOCK=${need_kib}K (tuning/smdb.service)"
    else
        fail "memlock $SOFT KiB < 512 KiB: glommio refuses to start an executor; set LimitMEMLOCK=${need_kib}K"
    fi
}
check_memlock "$EXECUTORS" "$NEED_KIB"

# --- cpu ----------------------------------------------------------------------------------
section "cpu"
info "online CPUs: $ONLINE (${#CPUS[@]})"
MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
[ -n "$MODEL" ] && info "model: $MODEL"
GOVS=$(cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
if [ -z "$GOVS" ]; then
    info "CPU governor: not exposed (no cpufreq driver: typical of VMs, where the host decides)"
elif echo "$GOVS" | grep -qv performance; then
    warn "CPU governor: $GOVS; use 'performance' on shard cores (cpupower frequency-set -g performance)"
else
    ok "CPU governor: $GOVS"
fi
IDLE_DRV=$(readf /sys/devices/system/cpu/cpuidle/current_driver)
HALT_POLL_NS=$(readf /sys/module/haltpoll/parameters/guest_halt_poll_ns)
if [ "$IDLE_DRV" = haltpoll ] && [ "$HALT_POLL_NS" = 0 ]; then
    warn "cpuidle: haltpoll with guest_halt_poll_ns=0: an idle vCPU halts at once and each wake-up is a VM exit (tens of µs on every request at low concurrency); set 200000 (README §10)"
elif [ "$IDLE_DRV" = haltpoll ]; then
    ok "cpuidle: haltpoll, guest_halt_poll_ns=$HALT_POLL_NS"
elif [ -n "$IDLE_DRV" ]; then
    info "cpuidle driver: $IDLE_DRV"
fi
if [ -n "$ISOL_CPUS" ]; then ok "isolcpus=$ISOL (isolated: $ISOL_CPUS)"; else info "isolcpus: none (fine for a shared or small host; see README for dedicated hosts)"; fi
if [ -n "$NOHZ" ]; then ok "nohz_full=$NOHZ"; else info "nohz_full: none"; fi
SMT=$(readf /sys/devices/system/cpu/smt/active)
case "$SMT" in 1) info "SMT active: hyperthread siblings share a core; the recommendation uses one per core" ;; 0) info "SMT inactive" ;; esac
IRQBALANCE=0
for c in /proc/[0-9]*/comm; do
    if [ "$(cat "$c" 2>/dev/null)" = irqbalance ]; then IRQBALANCE=1; break; fi
done
if [ "$IRQBALANCE" -eq 1 ]; then
    warn "irqbalance is running: it may move NIC/NVMe interrupts onto shard cores (use IRQBALANCE_BANNED_CPULIST, see README)"
else
    info "irqbalance not running"
fi

# --- numa ---------------------------------------------------------------------------------
section "numa"
NODES=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null)
if [ -z "$NODES" ]; then
    info "no NUMA information in /sys (single node assumed)"
else
    N_NODES=0
    for n in $NODES; do
        N_NODES=$((N_NODES + 1))
        info "$(basename "$n"): CPUs $(readf "$n/cpulist")"
    done
    if [ "$N_NODES" -gt 1 ]; then
        warn "$N_NODES NUMA nodes: keep a server's shards on the node of its NIC and NVMe (see README)"
    else
        ok "single NUMA node"
    fi
fi

# --- storage ------------------------------------------------------------------------------
section "storage"
DIR=$DATA_DIR
while [ ! -e "$DIR" ] && [ "$DIR" != / ] && [ "$DIR" != . ]; do DIR=$(dirname "$DIR"); done
[ -e "$DIR" ] || DIR=.
FSTYPE=$(stat -f -c %T "$DIR" 2>/dev/null || echo unknown)
SOURCE=$(df -P "$DIR" 2>/dev/null | awk 'NR==2 {print $1}')
info "data dir $DATA_DIR (checked at $DIR): filesystem $FSTYPE on ${SOURCE:-unknown}"
case "$FSTYPE" in
    ext2/ext3|ext4|xfs) ok "$FSTYPE supports O_DIRECT and fdatasync as smdb expects" ;;
    tmpfs|ramfs) fail "$FSTYPE: glommio drops O_DIRECT and nothing survives a reboot; use ext4 or xfs on a real disk" ;;
    overlayfs) warn "overlayfs (container layer): O_DIRECT works on recent kernels over ext4, but put the data dir on a volume" ;;
    btrfs) warn "btrfs: copy-on-write adds write amplification to every fdatasync; prefer ext4 or xfs" ;;
    *) info "filesystem $FSTYPE not checked; ext4 or xfs recommended" ;;
esac
DEV=
if [ -n "$SOURCE" ] && [ -e "$SOURCE" ]; then
    DEV=$(basename "$(readlink -f "$SOURCE")")
    SYS=$(readlink -f "/sys/class/block/$DEV" 2>/dev/null)
    if [ -n "$SYS" ] && [ -e "$SYS/partition" ]; then DEV=$(basename "$(dirname "$SYS")"); fi
fi
if [ -n "$DEV" ] && [ -d "/sys/block/$DEV/queue" ]; then
    Q=/sys/block/$DEV/queue
    SCHED=$(readf "$Q/scheduler")
    ROT=$(readf "$Q/rotational")
    WC=$(readf "$Q/write_cache")
    info "block device $DEV: scheduler '$SCHED', rotational=${ROT:-?}, write_cache='${WC:-?}', logical block $(readf "$Q/logical_block_size") B, physical $(readf "$Q/physical_block_size") B"
    case "$DEV:$SCHED" in
        nvme*:*"[none]"*) ok "NVMe with scheduler none" ;;
        nvme*) warn "NVMe $DEV: set the scheduler to none (udev rule in README)" ;;
    esac
    [ "$ROT" = 1 ] && warn "$DEV reports rotational=1 (virtual disks often do): on a real HDD every group commit waits for the platter; use SSD/NVMe"
    case "$WC" in
        "write back") info "volatile write cache: fdatasync flushes it; prefer drives with power-loss protection for low fsync latency" ;;
    esac
else
    info "no block device found for ${SOURCE:-the data dir} (container, overlay or network filesystem): scheduler not checked"
fi

# --- memory -------------------------------------------------------------------------------
section "memory"
THP=$(readf /sys/kernel/mm/transparent_hugepage/enabled)
THP_DEFRAG=$(readf /sys/kernel/mm/transparent_hugepage/defrag)
if [ -z "$THP" ]; then info "transparent hugepages: not exposed"
else
    case "$THP" in
        *"[always]"*) warn "THP enabled=always: khugepaged compaction causes latency spikes; use madvise" ;;
        *) ok "THP enabled: $THP" ;;
    esac
    case "$THP_DEFRAG" in
        *"[always]"*) warn "THP defrag=always stalls allocations on compaction; use defer+madvise or madvise" ;;
        '') ;;
        *) ok "THP defrag: $THP_DEFRAG" ;;
    esac
fi
SWAPPINESS=$(readf /proc/sys/vm/swappiness)
[ -n "$SWAPPINESS" ] && info "vm.swappiness = $SWAPPINESS (state lives in memory: 1-10 recommended on a dedicated host)"
MEM=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo 2>/dev/null)
[ -n "$MEM" ] && info "memory: $MEM"

# --- network ------------------------------------------------------------------------------
section "network"
# sysctl name, recommended minimum (from tuning/sysctl/90-smdb.conf)
while read -r name want; do
    f=/proc/sys/$(echo "$name" | tr . /)
    have=$(readf "$f" | awk '{print $1}')
    if [ -z "$have" ]; then info "$name: not visible here (network namespace or container)"
    elif [ "$have" -ge "$want" ]; then ok "$name = $have"
    else warn "$name = $have (recommended >= $want, tuning/sysctl/90-smdb.conf)"; fi
done <<'EOF'
net.core.somaxconn 4096
net.ipv4.tcp_max_syn_backlog 8192
net.core.netdev_max_backlog 16384
net.core.rmem_max 16777216
net.core.wmem_max 16777216
EOF
SSAI=$(readf /proc/sys/net/ipv4/tcp_slow_start_after_idle)
case "$SSAI" in
    0) ok "net.ipv4.tcp_slow_start_after_idle = 0" ;;
    1) warn "net.ipv4.tcp_slow_start_after_idle = 1: idle client connections restart slow start (set 0)" ;;
esac

# --- recommendation -----------------------------------------------------------------------
section "recommendation"
CORES_TOML=$(printf '%s\n' "${SHARD_CORES[@]}" | paste -sd, - | sed 's/,/, /g')
info "fronts (network.acceptor_cores = $ACCEPTORS) and the control executor: core(s) $(printf '%s\n' "${FRONTS[@]}" | join_list)"
[ ${#SECONDARY[@]} -gt 0 ] && info "left out (hyperthread siblings of used cores): $(printf '%s\n' "${SECONDARY[@]}" | join_list)"
if [ -n "$SHARDS" ] && [ "$SHARDS" -gt ${#PICK[@]} ]; then
    warn "--shards $SHARDS > ${#PICK[@]} free cores: shards will share cores (measured 30-40% slower on 2 cores, docs/glommio.md §5)"
fi
if [ ${#CPUS[@]} -le 2 ]; then
    info "on <= 2 CPUs one shard beside the front is fastest (docs/glommio.md §5); measure before adding more"
fi
# Hyperthread or isolation hints for IRQs: any device interrupt on a shard core.
IRQ_HITS=
while read -r irq name; do
    aff=$(readf "/proc/irq/$irq/smp_affinity_list")
    [ -n "$aff" ] || continue
    for c in "${SHARD_CORES[@]}"; do
        if expand_list "$aff" | grep -qx "$c"; then IRQ_HITS="$IRQ_HITS $irq($name)"; break; fi
    done
done < <(awk -F: '/^ *[0-9]+:/ { n = split($2, f, " "); gsub(/ /, "", $1); print $1, f[n] }' /proc/interrupts 2>/dev/null \
         | grep -Ei 'nvme|virtio|eth|ens|enp|eno|mlx|ixgbe|i40e|ice|ena|bnxt' | head -64)
if [ -n "$IRQ_HITS" ]; then
    info "device IRQs allowed on shard cores:$(echo "$IRQ_HITS" | cut -c1-300)"
    [ ${#CPUS[@]} -gt 2 ] && warn "move NIC/NVMe IRQs off the shard cores (README: IRQ affinity)"
else
    ok "no NIC/NVMe IRQ found on the shard cores (or none readable)"
fi
echo
echo "  suggested config (smdb.toml):"
echo "    [network]"
echo "    acceptor_cores = $ACCEPTORS"
echo "    [shards]"
echo "    count = $N"
echo "    cores = [$CORES_TOML]"
echo "    io_memory_bytes = $IO_MEMORY"
echo "  suggested systemd limit: LimitMEMLOCK=${NEED_MIB}M (or AmbientCapabilities=CAP_IPC_LOCK)"

section "summary"
echo "  $N_OK ok, $N_WARN warnings, $N_FAIL failures"
if [ "$STRICT" -eq 1 ] && [ "$N_FAIL" -gt 0 ]; then exit 1; fi
exit 0
