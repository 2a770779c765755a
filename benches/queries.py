#!/usr/bin/env python3
"""benches/queries.py: LIST and FIND page latency over a filled server, and what one lister
does to a write load (docs/queries.md; issue 50's figures in benches/RESULTS.md, "Indexes").

  python3 benches/queries.py [--instances 1000000] [--indexes 2] [--pairs 2] [--no-snapshots]
      [--server-bin target/release/smdb-server] [--bench-bin target/release/smdb-bench]

Starts a server (defaults, fsync always, a temp data dir), fills it with `smdb-bench --fill`
(context {"n":0, "customer": "c-<k % 100000>", "region": "r-<k % 8>"}, the given number of
declared indexes), then:
  1. times 300 LIST_INSTANCES pages {machine, state, limit: 10} at random cursors, and (with
     --indexes >= 1) 300 FIND_INSTANCES pages {where: {ctx.customer: random}, limit: 10};
  2. runs `smdb-bench --workload apply -c 16 --in-flight 8` for 8 s alone and with one lister
     (a LIST page every 100 ms), alternated --pairs times, and prints throughput, p99.9 and the
     worst request of each run.
"""
import argparse, json, os, random, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcp1  # noqa: E402

MACHINE = "smdb-bench"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def timed_pages(addr, op, make_params, n):
    c = rcp1.Conn(addr)
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.call(op, make_params())
        took.append((time.perf_counter() - t0) * 1000)
    return took


def cursor_of(id_):
    return id_.encode().hex()


def write_load(args, addr, lister):
    stop = threading.Event()
    pages = []

    def lister_loop():
        c = rcp1.Conn(addr)
        while not stop.is_set():
            t0 = time.perf_counter()
            c.call("LIST_INSTANCES", {"machine": MACHINE, "state": "on", "limit": 10})
            pages.append((time.perf_counter() - t0) * 1000)
            stop.wait(0.1)

    t = threading.Thread(target=lister_loop)
    if lister:
        t.start()
    out = subprocess.run(
        [args.bench_bin, "--addr", addr, "--workload", "apply", "-c", "16", "--in-flight", "8",
         "--duration", "8", "--warmup", "2", "--indexes", str(args.indexes), "--json"],
        capture_output=True, text=True, check=True).stdout
    stop.set()
    if lister:
        t.join()
    line = [json.loads(x) for x in out.splitlines() if x.startswith("{")][-1]
    lat = line["latency_us"]
    return line["ops_per_sec"], lat["p999"], lat["max"], pages


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=1_000_000)
    ap.add_argument("--indexes", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--no-snapshots", action="store_true",
                    help="no snapshot during the runs (a 10M-instance snapshot walk would "
                         "share the shard with every page measured)")
    ap.add_argument("--server-bin", default="target/release/smdb-server")
    ap.add_argument("--bench-bin", default="target/release/smdb-bench")
    args = ap.parse_args()
    rcp1.SERVER = args.server_bin
    d = tempfile.mkdtemp(prefix="smdb-queries-")
    cfg = os.path.join(d, "smdb.toml")
    with open(cfg, "w") as f:
        f.write(f'[network]\nbind_addr = "127.0.0.1:0"\n[storage]\ndata_dir = "{d}/data"\n')
        if args.no_snapshots:
            f.write("snapshot_every_entries = 1000000000\n")
    log = open(os.path.join(d, "server.log"), "w")
    p, addr, _, _ = rcp1.start(cfg, log)
    try:
        t0 = time.time()
        fill = subprocess.run(
            [args.bench_bin, "--addr", addr, "--server-pid", str(p.pid), "--fill",
             "--instances", str(args.instances), "--indexes", str(args.indexes),
             "-c", "4", "--in-flight", "64", "--json"],
            capture_output=True, text=True, check=True).stdout
        filled = [json.loads(x) for x in fill.splitlines() if x.startswith("{")][-1]
        print(f"fill: {args.instances} instances, {args.indexes} declared indexes, "
              f"{time.time() - t0:.0f} s, {filled['bytes_per_instance']:.0f} bytes per instance")
        first = rcp1.Conn(addr).call("LIST_INSTANCES", {"machine": MACHINE, "limit": 1})
        tag = first["instances"][0]["id"].split("-")[0]
        rand_id = lambda: f"{tag}-{random.randrange(args.instances)}"  # noqa: E731
        lists = timed_pages(addr, "LIST_INSTANCES", lambda: {
            "machine": MACHINE, "state": "on", "limit": 10, "cursor": cursor_of(rand_id())}, 300)
        print(f"LIST page (limit 10, random cursor): median {pct(lists, 0.5):.2f} ms, "
              f"p99 {pct(lists, 0.99):.2f} ms, max {max(lists):.2f} ms")
        if args.indexes >= 1:
            finds = timed_pages(addr, "FIND_INSTANCES", lambda: {
                "machine": MACHINE, "limit": 10,
                "where": {"ctx.customer": f"c-{random.randrange(100_000)}"}}, 300)
            print(f"FIND page (ctx.customer exact, limit 10): median {pct(finds, 0.5):.2f} ms, "
                  f"p99 {pct(finds, 0.99):.2f} ms, max {max(finds):.2f} ms")
        print("write load (apply 16x8, 8 s) | ops/s | p99.9 us | max us | lister pages")
        for _ in range(args.pairs):
            for lister in (False, True):
                ops, p999, mx, pages = write_load(args, addr, lister)
                shown = (f"{len(pages)}, median {pct(pages, 0.5):.1f} ms, max {max(pages):.1f} ms"
                         if pages else "-")
                print(f"{'with' if lister else 'without'} a lister | {ops:.0f} | {p999} | {mx} | "
                      f"{shown}")
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
