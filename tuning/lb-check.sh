#!/usr/bin/env bash
# End-to-end check of a rolling restart behind HAProxy, on loopback: two smdb servers with
# network.proxy_protocol = true and drain_grace_ms = 2000, HAProxy with tuning/haproxy.cfg
# (PROXY v2, /health checks), four clients creating instances and pinging through HAProxy while
# server 1 is drained by SIGTERM. Prints requests, SHUTTING_DOWN retries and failures; fails
# unless failures = 0, server 1 exited 0, and every acknowledged create is on a server.
#
# It runs the suite's test tests/haproxy.rs (the same check CI runs), which starts the servers,
# HAProxy and the load: run it from a checkout, with haproxy installed (apt-get install haproxy).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  echo "lb-check: haproxy is not installed (apt-get install haproxy)" >&2
  exit 2
fi
haproxy_bin=$(command -v haproxy || echo /usr/sbin/haproxy)
"$haproxy_bin" -c -f tuning/haproxy.cfg
exec cargo test --locked --test haproxy -- --nocapture --test-threads 1 "$@"
