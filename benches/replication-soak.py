#!/usr/bin/env python3
"""benches/replication-soak.py: primary + replica under write load, the replica SIGKILLed every
30-60 s (issue 19). Bounded and loopback only.

Starts a release primary (fsync always) and a replica on this machine, creates INSTANCES
instances, runs WRITERS threads applying `touch` events for SOAK_SECS seconds while the replica
is killed and restarted at random intervals in [KILL_MIN, KILL_MAX] s, samples the replica's
lag every 0.2 s (its /metrics, and the primary's per-replica gauge), then stops the load, waits for convergence and checks every
instance on both sides: state, wal_offset, event_count, and that the primary's event_count
equals the acknowledged touches (nothing lost, nothing applied twice).

Usage: cargo build --release --bin smdb-server && python3 benches/replication-soak.py
Environment: SOAK_SECS (600), KILL_MIN (30), KILL_MAX (60), INSTANCES (1000), WRITERS (4),
DATA_PARENT (/tmp).
"""
import json, os, random, re, signal, socket, struct, subprocess, sys, tempfile, threading, time

SOAK_SECS = int(os.environ.get("SOAK_SECS", 600))
KILL_MIN = float(os.environ.get("KILL_MIN", 30))
KILL_MAX = float(os.environ.get("KILL_MAX", 60))
INSTANCES = int(os.environ.get("INSTANCES", 1000))
WRITERS = int(os.environ.get("WRITERS", 4))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
SERVER = os.path.join(TARGET, "release", "smdb-server")

import rcp1
from rcp1 import Conn, metric, scrape

rcp1.SERVER = SERVER


def start(cfg, log):
    return rcp1.start(cfg, log)


ORDER = {"states": ["new", "paid"], "initial": "new", "final": [],
         "transitions": [{"from": "new", "event": "touch", "to": "new"},
                         {"from": "new", "event": "pay", "to": "paid"}]}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def write_config(path, text):
    with open(path, "w") as f:
        f.write(text)


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    work = tempfile.mkdtemp(prefix="smdb-soak-", dir=os.environ.get("DATA_PARENT", "/tmp"))
    port = free_port()
    pcfg, rcfg = os.path.join(work, "primary.toml"), os.path.join(work, "replica.toml")
    write_config(pcfg, f"""[network]\nbind_addr = "127.0.0.1:{port}"\n[storage]\ndata_dir = "{work}/p"
[metrics]\nenabled = true\nbind_addr = "127.0.0.1:0"\n[http]\nenabled = false\n[replication]\nrole = "primary"\n""")
    write_config(rcfg, f"""[network]\nbind_addr = "127.0.0.1:0"\n[storage]\ndata_dir = "{work}/r"
[metrics]\nenabled = true\nbind_addr = "127.0.0.1:0"\n[http]\nenabled = false\n[replication]\nrole = "replica"
upstream = "127.0.0.1:{port}"\nreplica_id = "soak"\nreconnect_max_ms = 1000\n""")
    plog, rlog = open(os.path.join(work, "primary.log"), "w"), open(os.path.join(work, "replica.log"), "a")
    prim, paddr, pmaddr, _ = start(pcfg, plog)
    rep, raddr, rmaddr, _ = start(rcfg, rlog)
    c = Conn(paddr)
    c.call("PUT_MACHINE", {"machine": "order", "version": 1, "definition": ORDER})
    ids = [f"soak-{i}" for i in range(INSTANCES)]
    for i in range(0, INSTANCES, 500):
        ops = [{"op": "CREATE_INSTANCE", "params": {"machine": "order", "version": 1, "id": x, "context": {}}}
               for x in ids[i:i + 500]]
        c.call("BATCH", {"mode": "best_effort", "ops": ops})
    stop = threading.Event()
    acked = [dict() for _ in range(WRITERS)]

    def writer(k):
        w = Conn(paddr)
        n = 0
        while not stop.is_set():
            x = ids[random.randrange(len(ids))]
            w.call("APPLY_EVENT", {"instance_id": x, "event": "touch", "payload": {"w": k, "n": n}})
            acked[k][x] = acked[k].get(x, 0) + 1
            n += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
    for t in threads:
        t.start()
    lag_e, lag_s, plag, kills = [], [], [], 0
    t0 = time.time()
    next_kill = t0 + random.uniform(KILL_MIN, KILL_MAX)
    state = {"rmaddr": rmaddr, "rep": rep, "raddr": raddr}
    while time.time() - t0 < SOAK_SECS:
        time.sleep(0.2)
        try:
            m = scrape(state["rmaddr"])
            lag_e.append(metric(m, "svc_replication_lag_entries"))
            lag_s.append(metric(m, "svc_replication_lag_seconds"))
        except OSError:
            pass  # the replica is restarting
        plag.append(metric(scrape(pmaddr), "svc_replication_replica_lag_entries") or 0.0)
        if time.time() >= next_kill:
            state["rep"].kill()
            state["rep"].wait()
            kills += 1
            state["rep"], state["raddr"], state["rmaddr"], _ = start(rcfg, rlog)
            next_kill = time.time() + random.uniform(KILL_MIN, KILL_MAX)
    stop.set()
    for t in threads:
        t.join()
    total = sum(sum(a.values()) for a in acked)
    # Converge: the replica's status positions equal the primary's. Fresh connections: `c` sat
    # idle through the soak, past network.idle_timeout_secs.
    c, rc = Conn(paddr), Conn(state["raddr"])
    deadline = time.time() + 120
    while True:
        ps, rs = c.call("REPLICATION_STATUS", {}), rc.call("REPLICATION_STATUS", {})
        if ps["positions"] == rs["positions"]:
            break
        if time.time() > deadline:
            print("NO CONVERGENCE", ps, rs)
            sys.exit(1)
        time.sleep(0.2)
    mismatches = lost = 0
    for x in ids:
        a = c.call("GET_INSTANCE", {"instance_id": x})
        b = rc.call("GET_INSTANCE", {"instance_id": x})
        if (a["state"], a["wal_offset"], a["event_count"], a["context"]) != \
                (b["state"], b["wal_offset"], b["event_count"], b["context"]):
            mismatches += 1
        want = sum(k.get(x, 0) for k in acked)
        if a["event_count"] != want:
            lost += 1
    m = scrape(pmaddr)
    print(json.dumps({
        "seconds": round(time.time() - t0), "entries_written": total, "replica_kills": kills,
        "positions": ps["positions"], "instances_checked": len(ids),
        "replica_mismatches": mismatches, "primary_event_count_mismatches": lost,
        "lag_entries": {"p50": percentile(lag_e, .5), "p99": percentile(lag_e, .99), "max": max(lag_e or [0])},
        "lag_seconds": {"p50": percentile(lag_s, .5), "p99": percentile(lag_s, .99), "max": max(lag_s or [0])},
        "primary_view_lag_entries": {"p50": percentile(plag, .5), "p99": percentile(plag, .99), "max": max(plag or [0])},
        "entries_sent": metric(m, "svc_replication_entries_sent_total"),
        "slow_replica_disconnects": metric(m, "svc_replication_slow_replica_disconnects_total"),
    }, indent=1))
    state["rep"].kill()
    prim.kill()
    sys.exit(0 if mismatches == 0 and lost == 0 else 1)


if __name__ == "__main__":
    main()
