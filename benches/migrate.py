#!/usr/bin/env python3
"""benches/migrate.py: how long MIGRATE_INSTANCES takes over a filled server, and what it does
to a write load meanwhile (docs/lifecycle.md; issue 50's figures in benches/RESULTS.md).

  python3 benches/migrate.py [--instances 1000000] [--pairs 2] [--limit 10000]
      [--server-bin target/release/smdb-server] [--bench-bin target/release/smdb-bench]

Starts a server (defaults: fsync always, a temp data dir; no snapshot during the runs unless
--snapshots, so that a snapshot's walk is not counted against the migration), fills it with `smdb-bench --fill`,
stores a version 2 of the bench machine (one more state), then, alternated --pairs times:
  - a write load alone: `smdb-bench --workload apply -c 16 --in-flight 8` for --seconds;
  - the same load with a migration of every instance from the version they are at to the
    other one (1 -> 2, then 2 -> 1, ...), driven by cursor with `limit` per call from 2 s in.
Prints the load's throughput, p99.9 and worst request for each run, and for each migration
its duration, instances per second, the calls it took and the slowest call.
"""
import argparse, json, os, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcp1  # noqa: E402

MACHINE = "smdb-bench"


def write_load(args, addr):
    out = subprocess.run(
        [args.bench_bin, "--addr", addr, "--workload", "apply", "-c", "16", "--in-flight", "8",
         "--duration", str(args.seconds), "--warmup", "1", "--json"],
        capture_output=True, text=True, check=True).stdout
    line = [json.loads(x) for x in out.splitlines() if x.startswith("{")][-1]
    return line["ops_per_sec"], line["latency_us"]["p999"], line["latency_us"]["max"]


def migrate(addr, frm, to, limit):
    """Drives one migration to its end; (seconds, migrated, calls, slowest call ms)."""
    c = rcp1.Conn(addr)
    cursor, migrated, calls, slowest = None, 0, 0, 0.0
    t0 = time.perf_counter()
    while True:
        p = {"machine": MACHINE, "from_version": frm, "to_version": to, "limit": limit}
        if cursor:
            p["cursor"] = cursor
        t = time.perf_counter()
        r = c.call("MIGRATE_INSTANCES", p)
        slowest = max(slowest, (time.perf_counter() - t) * 1000)
        calls += 1
        migrated += r["migrated"]
        cursor = r["cursor"]
        if cursor is None:
            return time.perf_counter() - t0, migrated, calls, slowest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=1_000_000)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=10_000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--snapshots", action="store_true",
                    help="keep the default snapshot cadence (off: no snapshot during the runs)")
    ap.add_argument("--server-bin", default="target/release/smdb-server")
    ap.add_argument("--bench-bin", default="target/release/smdb-bench")
    args = ap.parse_args()
    rcp1.SERVER = args.server_bin
    d = tempfile.mkdtemp(prefix="smdb-migrate-")
    cfg = os.path.join(d, "smdb.toml")
    with open(cfg, "w") as f:
        f.write(f'[network]\nbind_addr = "127.0.0.1:0"\n[storage]\ndata_dir = "{d}/data"\n')
        if not args.snapshots:
            f.write("snapshot_every_entries = 1000000000\n")
    log = open(os.path.join(d, "server.log"), "w")
    p, addr, _, _ = rcp1.start(cfg, log)
    try:
        subprocess.run(
            [args.bench_bin, "--addr", addr, "--server-pid", str(p.pid), "--fill",
             "--instances", str(args.instances), "-c", "4", "--in-flight", "64", "--json"],
            capture_output=True, text=True, check=True)
        c = rcp1.Conn(addr)
        v1 = c.call("GET_MACHINE", {"machine": MACHINE, "version": 1})["definition"]
        v2 = dict(v1, states=v1["states"] + ["off"])
        c.call("PUT_MACHINE", {"machine": MACHINE, "version": 2, "definition": v2})
        print(f"filled {args.instances} instances; write load apply 16x8 for {args.seconds} s")
        print("run | ops/s | p99.9 us | max us | migration")
        at = 1
        for _ in range(args.pairs):
            ops, p999, mx = write_load(args, addr)
            print(f"alone | {ops:.0f} | {p999} | {mx} | -")
            result = {}

            def run_migration(frm=at, to=3 - at):
                time.sleep(2)
                result["m"] = migrate(addr, frm, to, args.limit)

            t = threading.Thread(target=run_migration)
            t.start()
            ops, p999, mx = write_load(args, addr)
            t.join()
            secs, n, calls, slowest = result["m"]
            print(f"with a migration | {ops:.0f} | {p999} | {mx} | v{at}->v{3 - at}: {n} in "
                  f"{secs:.1f} s ({n / secs:.0f}/s), {calls} calls, slowest call "
                  f"{slowest:.0f} ms")
            at = 3 - at
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
