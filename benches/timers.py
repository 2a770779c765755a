#!/usr/bin/env python3
"""benches/timers.py: durable timers at scale (issue 17).

1. Starts a release smdb-server (fsync=never so loading is quick; metrics on), creates
   N instances (default 1,000,000) of a machine whose `pending` state has a timer
   (`at: ctx.due`, one day out), via BATCH best_effort of 1000 creates, and reports resident
   memory per instance before/after and `svc_timers_pending`.
2. SIGKILLs it and restarts: the shard's "timers: N armed from state in T ms" log line is the
   rebuild time (the replay time is printed by the WAL on the line before).
3. Creates FIRE (default 100,000) more instances all due at the same instant a few seconds
   out, runs `smdb-bench --workload apply --connections 16 --in-flight 1` across that instant,
   and reports the client p99 and the lateness p50/p99 from `svc_timer_lateness_seconds`; a
   baseline smdb-bench run without fires comes first.

Usage: cargo build --release -p smdb -p smdb-bench --bin smdb-server --bin smdb-bench && python3 benches/timers.py
Environment: N, FIRE, BENCH_SECS (20), DATA_PARENT (/tmp).
"""
import json, os, re, signal, socket, struct, subprocess, sys, tempfile, time

N = int(os.environ.get("N", 1_000_000))
FIRE = int(os.environ.get("FIRE", 100_000))
BENCH_SECS = int(os.environ.get("BENCH_SECS", 20))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
SERVER = os.path.join(TARGET, "release", "smdb-server")
BENCH = os.path.join(TARGET, "release", "smdb-bench")

import rcp1
from rcp1 import Conn, crc32c, metric, quantile, rss_kib, scrape

rcp1.SERVER = SERVER


def start(cfg, log):
    return rcp1.start(cfg, log)


def create(c, ids_due, label):
    t0 = time.time()
    batch, sent, done = [], 0, 0
    window = 4
    def flush(batch):
        ops = [{"op": "CREATE_INSTANCE", "params": {"machine": "expiry", "version": 1, "id": i,
                "context": {"due": d}}} for i, d in batch]
        c.send("BATCH", {"mode": "best_effort", "ops": ops})
    inflight = 0
    count = 0
    for item in ids_due:
        count += 1
        batch.append(item)
        if len(batch) == 1000:
            flush(batch); batch = []; inflight += 1
            if inflight >= window:
                r = c.recv(); inflight -= 1
                assert r["status"] == "ok", r
    if batch:
        flush(batch); inflight += 1
    while inflight:
        r = c.recv(); inflight -= 1
        assert r["status"] == "ok", r
    dt = time.time() - t0
    print(f"{label}: created in {dt:.1f} s ({count / dt:.0f}/s)", flush=True)


def bench(addr, label, secs):
    out = subprocess.run([BENCH, "--addr", addr, "--workload", "apply", "--connections", "16",
                          "--in-flight", "1", "--duration", str(secs), "--warmup", "1",
                          "--instances", "10000", "--json", "--label", label],
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    lat = r["latency_us"]
    print(f"{label}: {r['ops_per_sec']:.0f} ops/s, p50 {lat['p50']:.0f} us, p99 {lat['p99']:.0f} us, "
          f"max {lat['max']:.0f} us, errors {r.get('errors_total')}", flush=True)
    return r


def main():
    d = tempfile.mkdtemp(prefix="smdb-timers-", dir=os.environ.get("DATA_PARENT", "/tmp"))
    cfg = os.path.join(d, "smdb.toml")
    with open(cfg, "w") as f:
        f.write(f'[network]\nbind_addr = "127.0.0.1:0"\n[storage]\ndata_dir = "{d}/data"\n'
                'fsync = "never"\nsnapshot_every_entries = 1000000000\n'
                '[metrics]\nenabled = true\nbind_addr = "127.0.0.1:0"\n[http]\nenabled = false\n')
    log = open(os.path.join(d, "server.log"), "w")
    p, addr, maddr, _ = start(cfg, log)
    try:
        c = Conn(addr)
        c.call("PUT_MACHINE", {"machine": "expiry", "version": 1, "definition": {
            "states": ["pending", "expired"], "initial": "pending", "final": ["expired"],
            "transitions": [{"from": "pending", "event": "expire", "to": "expired", "at": "ctx.due"}]}})
        base = rss_kib(p.pid)
        far = int(time.time() * 1000) + 86_400_000
        create(c, ((f"t-{i:07d}", far) for i in range(N)), f"{N} instances with a pending timer")
        time.sleep(1)
        after = rss_kib(p.pid)
        m = scrape(maddr)
        print(f"RSS {base / 1024:.0f} MiB -> {after / 1024:.0f} MiB: {(after - base) * 1024 / N:.0f} bytes "
              f"per instance with its timer; svc_timers_pending {metric(m, 'svc_timers_pending'):.0f}", flush=True)

        p.send_signal(signal.SIGKILL); p.wait()
        p, addr, maddr, up = start(cfg, log)
        log.flush()
        text = open(os.path.join(d, "server.log")).read()
        armed = re.findall(r"timers: (\d+) armed from state in ([\d.]+) ms", text)
        rec = re.findall(r"recovered[^\n]*", text)
        print(f"restart after SIGKILL: listening after {up:.2f} s; {rec[-1] if rec else ''}; "
              f"timers rebuilt: {armed[-1][0]} in {armed[-1][1]} ms", flush=True)
        print(f"RSS after restart {rss_kib(p.pid) / 1024:.0f} MiB", flush=True)

        c = Conn(addr)
        bench(addr, "baseline apply 16x1", BENCH_SECS // 2)
        due = int(time.time() * 1000) + 25_000
        t0 = time.time()
        create(c, ((f"f-{i:07d}", due) for i in range(FIRE)), f"{FIRE} instances due at once")
        wait = due / 1000 - time.time() - 3
        print(f"all {FIRE} due in {wait + 3:.1f} s; load starts 3 s before", flush=True)
        if wait > 0:
            time.sleep(wait)
        r = bench(addr, f"apply 16x1 while {FIRE} timers fire", BENCH_SECS)
        m = scrape(maddr)
        fired = metric(m, 'svc_timers_fired_total')
        p50 = quantile(m, "svc_timer_lateness_seconds", 0.5)
        p99 = quantile(m, "svc_timer_lateness_seconds", 0.99)
        print(f"fired {fired:.0f}; lateness p50 <= {p50} s, p99 <= {p99} s (bucket bounds); "
              f"svc_timers_pending {metric(m, 'svc_timers_pending'):.0f}", flush=True)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
