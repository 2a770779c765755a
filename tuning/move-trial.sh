#!/usr/bin/env bash
# The move trial (issue 51, docs/cluster.md "Move trial"): on loopback, a three-member etcd
# and two groups of two smdb members in sync mode; writers apply events with idempotency keys
# through the Rust cluster client while a third of a group's slots moves MOVES times, back and
# forth. Prints each move (instances, entries and bytes shipped, freeze, attempts, duration,
# the writers' worst request while it ran) and one `TRIAL ...` line: acknowledged writes,
# lost (goal 0), failed, freeze p50 / max (goal <= 100 / <= 500 ms), the worst request during
# moves, entries and bytes moved per second, and ms per 1,000 instances moved.
#
# Needs etcd (Debian etcd-server; `.ci/test --install-only` installs it). Bounded: loading
# plus about 2-5 s per move here.
#   MOVES=10 INSTANCES=10000 HISTORY=5 WRITERS=4 tuning/move-trial.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo build -q --bins --locked 2>"$log" || { cat "$log"; exit 1; }
cargo test -q --locked --test move_trial --no-run 2>"$log" || { cat "$log"; exit 1; }
TRIAL_MOVES=${MOVES:-10} TRIAL_INSTANCES=${INSTANCES:-10000} TRIAL_HISTORY=${HISTORY:-5} \
  TRIAL_WRITERS=${WRITERS:-4} \
  cargo test -q --locked --test move_trial -- --ignored --nocapture 2>&1 |
  grep -E '^(loaded|move |TRIAL|  failed|thread|test result|acknowledged)' || true
