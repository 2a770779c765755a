#!/usr/bin/env bash
# The failover trial (issue 37, docs/ha.md "Failover trial"): on loopback, a three-member etcd
# and three smdb members; writers create instances with idempotency keys while the primary is
# SIGKILLed ROUNDS times (restarted each time). Three arms: sync mode through the multi-address
# client, sync mode through HAProxy (tuning/haproxy-ha.cfg), async mode. Each prints one
# `TRIAL ...` line: acknowledged writes, lost, failed, entries truncated on rejoin, and the
# write gap (SIGKILL to a writer's first `ok` on a new connection) p50 / max / min.
#
# Needs etcd and haproxy (Debian etcd-server, haproxy; `.ci/test --install-only` installs
# them). Bounded: about 40 s per round at worst; 10 rounds x 3 arms is 5-10 minutes here.
#   ROUNDS=10 TTL_MS=3000 tuning/failover-trial.sh [sync-direct|sync-haproxy|async-direct ...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-10}
TTL_MS=${TTL_MS:-3000}
arms=("$@")
[ ${#arms[@]} -gt 0 ] || arms=(sync-direct sync-haproxy async-direct)
cargo build -q --bins --locked
cargo test -q --locked --test failover_trial --no-run
for arm in "${arms[@]}"; do
  mode=${arm%-*} via=${arm#*-}
  echo "== $arm: $ROUNDS SIGKILLs of the primary, ttl_ms = $TTL_MS"
  TRIAL_ROUNDS=$ROUNDS TRIAL_TTL_MS=$TTL_MS TRIAL_MODE=$mode TRIAL_VIA=$via \
    cargo test -q --locked --test failover_trial -- --ignored --nocapture 2>&1 |
    grep -E '^(round|TRIAL|  failed|thread|test result)' || true
done
