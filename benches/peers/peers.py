#!/usr/bin/env python3
"""benches/peers/peers.py: smdb beside what its users would pick instead, the same durable
transition on each, each driven by its own load tool, alternated in one window (README.md).

  python3 benches/peers/peers.py [--rounds 2] [--seconds 10]
      [--server-bin target/release/smdb-server] [--bench-bin target/release/smdb-bench]
      [--systems smdb,reference,redis,postgres] [--shapes 16x1,16x8]

- Redis (Debian's redis-server): `appendonly yes`, `appendfsync always`, the transition as the
  Lua script transition.lua, driven by redis-benchmark (EVALSHA, 16 clients, pipeline 1 or 8).
- PostgreSQL (Debian's postgresql): fsync and synchronous_commit on, the transition as the
  PL/pgSQL function in transition.sql, driven by pgbench (16 clients, and 128 for "16x8": one
  transaction in flight per connection).
- smdb: the release server with its defaults (fsync always), driven by smdb-bench's apply
  workload (the self-loop `inc` with a payload), 16 connections with 1 or 8 in flight.

3,200 instances each. Prints throughput, p99 latency and the server's CPU per op (its
processes' CPU time over the run divided by the ops; for PostgreSQL every backend's, counted
through the postmaster). Installs redis-server and postgresql with apt when they are missing
(as root). Everything runs on 127.0.0.1 / a Unix socket in a temp dir, which it removes.
"""
import argparse, glob, json, os, shutil, signal, socket, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")
INSTANCES = 3200


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid, children=False):
    """utime + stime of `pid` (and its reaped children's), in seconds."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    t = int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if children else 0)
    return t / TICK


def user_sys(pid):
    """(utime, stime) of `pid` in clock ticks."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return (0, 0)
    return (int(f[11]), int(f[12]))


def kernel_share(pid, run):
    """Runs `run()` and returns its result with the share of `pid`'s CPU time spent in the
    kernel meanwhile (None for a process tree, whose children are not followed)."""
    (u0, s0) = user_sys(pid)
    out = run()
    (u1, s1) = user_sys(pid)
    total = (u1 - u0) + (s1 - s0)
    return out, ((s1 - s0) / total if total else None)


def children_of(pid):
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            f = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(f[1]) == pid:
            out.append(int(stat.split("/")[2]))
    return out


def tree_cpu_s(pid):
    """A postmaster's CPU: its own, its reaped children's, and its live children's."""
    return cpu_s(pid, children=True) + sum(cpu_s(c) for c in children_of(pid))


def ensure_installed():
    need = [p for p, b in [("redis-server", "redis-server"), ("redis-tools", "redis-benchmark"),
                           ("postgresql", "pgbench")] if not shutil.which(b)]
    if need:
        subprocess.run(["apt-get", "install", "-y", *need], check=True,
                       stdout=subprocess.DEVNULL)


def wait_port(port, limit=30):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


class Redis:
    name = "Redis, AOF always, Lua"

    def __init__(self, d):
        self.port = free_port()
        os.makedirs(f"{d}/redis")
        self.p = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             f"{d}/redis", "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL)
        wait_port(self.port)
        cli = ["redis-cli", "-p", str(self.port)]
        subprocess.run(cli + ["HSET", "def:bench", "on|inc", "on"], check=True,
                       stdout=subprocess.DEVNULL)
        load = "".join(f"HSET i:{k:012d} state on ctx '{{\"n\":0}}' events 0\n"
                       for k in range(INSTANCES))
        subprocess.run(cli, input=load, text=True, check=True, stdout=subprocess.DEVNULL)
        script = open(f"{HERE}/transition.lua").read()
        self.sha = subprocess.run(cli + ["SCRIPT", "LOAD", script], capture_output=True,
                                  text=True, check=True).stdout.strip()

    def run(self, shape, seconds):
        pipeline = 8 if shape == "16x8" else 1
        n = int(seconds * (70_000 if pipeline == 8 else 22_000))
        before = cpu_s(self.p.pid)
        out = subprocess.run(
            ["redis-benchmark", "-p", str(self.port), "-c", "16", "-P", str(pipeline), "-n",
             str(n), "-r", str(INSTANCES), "--csv", "EVALSHA", self.sha, "1",
             "i:__rand_int__", "inc", '{"n":1}'], capture_output=True, text=True, check=True)
        cpu = cpu_s(self.p.pid) - before
        row = [x.strip('"') for x in out.stdout.strip().splitlines()[-1].split(",")]
        return float(row[1]), float(row[6]), cpu / n * 1e6

    def stop(self):
        self.p.terminate()
        self.p.wait()


class Postgres:
    name = "PostgreSQL, synchronous_commit on, PL/pgSQL"

    def __init__(self, d):
        self.port = free_port()
        self.dir = f"{d}/pg"
        os.makedirs(self.dir)
        shutil.chown(self.dir, "postgres", "postgres")
        bin_dir = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
        as_pg = ["runuser", "-u", "postgres", "--"]
        subprocess.run(as_pg + [f"{bin_dir}/initdb", "-D", f"{self.dir}/data", "-A", "trust"],
                       check=True, stdout=subprocess.DEVNULL)
        self.p = subprocess.Popen(
            as_pg + [f"{bin_dir}/postgres", "-D", f"{self.dir}/data", "-p", str(self.port),
                     "-k", self.dir, "-c", "listen_addresses=", "-c", "fsync=on",
                     "-c", "synchronous_commit=on", "-c", "max_connections=200",
                     "-c", "shared_buffers=256MB"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.psql = as_pg + ["psql", "-h", self.dir, "-p", str(self.port), "-q"]
        for _ in range(100):
            if subprocess.run(self.psql + ["-c", "SELECT 1"], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        subprocess.run(self.psql + ["-c", "CREATE DATABASE bench"], check=True)
        subprocess.run(self.psql + ["-d", "bench", "-f", f"{HERE}/transition.sql"], check=True,
                       stdout=subprocess.DEVNULL)
        shutil.copy(f"{HERE}/pgbench.sql", f"{self.dir}/pgbench.sql")
        self.postmaster = int(open(f"{self.dir}/data/postmaster.pid").readline())

    def run(self, shape, seconds):
        clients = 128 if shape == "16x8" else 16
        logs = f"{self.dir}/log{shape}"
        before = tree_cpu_s(self.postmaster)
        out = subprocess.run(
            ["runuser", "-u", "postgres", "--", "pgbench", "-h", self.dir, "-p",
             str(self.port), "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T",
             str(seconds), "-f", f"{self.dir}/pgbench.sql", "--log", "--log-prefix", logs,
             "bench"], capture_output=True, text=True, check=True, cwd=self.dir).stdout
        time.sleep(1)  # the backends exit and are reaped into the postmaster's times
        cpu = tree_cpu_s(self.postmaster) - before
        tps = next(float(line.split("=")[1].split()[0]) for line in out.splitlines()
                   if line.startswith("tps"))
        lat = []
        for f in glob.glob(logs + "*"):
            lat += [int(line.split()[2]) for line in open(f) if line.strip()]
            os.remove(f)
        lat.sort()
        p99 = lat[int(0.99 * (len(lat) - 1))] / 1000 if lat else float("nan")
        return tps, p99, cpu / (tps * seconds) * 1e6

    def stop(self):
        # The postmaster itself (runuser does not pass signals on): a fast shutdown.
        os.kill(self.postmaster, signal.SIGINT)
        self.p.wait()


class Smdb:
    name = "smdb (defaults: fsync always)"

    def __init__(self, d, server_bin, bench_bin, on_shards=False, shards=None):
        self.port = free_port()
        self.bench = bench_bin
        tag = ("-on-shards" if on_shards else "") + (f"-{shards}" if shards else "")
        if on_shards:
            self.name = "smdb, fronts_on_shards = true"
        if shards:
            self.name += f", {shards} shards"
        cfg = f"{d}/smdb{tag}.toml"
        with open(cfg, "w") as f:
            f.write(f'[network]\nbind_addr = "127.0.0.1:{self.port}"\n'
                    f'fronts_on_shards = {str(on_shards).lower()}\n'
                    f'[storage]\ndata_dir = "{d}/smdb{tag}"\n'
                    f'[metrics]\nbind_addr = "127.0.0.1:{free_port()}"\n'
                    f'[http]\nbind_addr = "127.0.0.1:{free_port()}"\n'
                    + (f'[shards]\ncount = {shards}\n' if shards else ''))
        self.p = subprocess.Popen([server_bin, "--config", cfg], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def run(self, shape, seconds):
        in_flight = "8" if shape == "16x8" else "1"
        out = subprocess.run(
            [self.bench, "--addr", f"127.0.0.1:{self.port}", "--server-pid", str(self.p.pid),
             "--workload", "apply", "-c", "16", "--in-flight", in_flight, "--instances",
             str(INSTANCES), "--duration", str(seconds), "--warmup", "2", "--json"],
            capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"smdb-bench against {self.name} failed: {out.stderr.strip()}")
        out = out.stdout
        r = [json.loads(x) for x in out.splitlines() if x.startswith("{")][-1]
        ops = r["ops_per_sec"]
        return ops, r["latency_us"]["p99"] / 1000, r["cpu"]["server_cores"] / ops * 1e6

    def stop(self):
        self.p.terminate()
        self.p.wait()


class Reference(Smdb):
    """The bare design (benches/reference_server.rs): front + one shard + O_DSYNC group commit
    and nothing else, driven by the same load as smdb, so smdb's distance to the design's floor
    is a number."""
    name = "reference server (bare design, O_DSYNC)"

    def __init__(self, d, server_bin, bench_bin, cores="two"):
        self.port = free_port()
        self.bench = bench_bin
        if cores == "one":
            self.name = "reference, one core (connections on the shard's executor)"
        os.makedirs(f"{d}/ref-{cores}", exist_ok=True)
        self.p = subprocess.Popen([server_bin, f"127.0.0.1:{self.port}", f"{d}/ref-{cores}",
                                   "dsync", cores],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--server-bin", default="target/release/smdb-server")
    ap.add_argument("--bench-bin", default="target/release/smdb-bench")
    ap.add_argument("--ref-bin", default="target/release/examples/reference_server")
    ap.add_argument("--systems", default="smdb,redis,postgres",
                    help="comma-separated, in run order: smdb, smdb-on-shards, smdb-on-shards-2 (two "
                    "shards, a front on each), reference, "
                    "reference-one, redis, postgres")
    ap.add_argument("--shapes", default="16x1,16x8")
    args = ap.parse_args()
    if "redis" in args.systems or "postgres" in args.systems:
        ensure_installed()
    d = tempfile.mkdtemp(prefix="smdb-peers-")
    os.chmod(d, 0o755)
    systems = []
    try:
        make = {"smdb": lambda: Smdb(d, args.server_bin, args.bench_bin),
                "smdb-on-shards": lambda: Smdb(d, args.server_bin, args.bench_bin, True),
                "smdb-on-shards-2": lambda: Smdb(d, args.server_bin, args.bench_bin, True, 2),
                "reference": lambda: Reference(d, args.ref_bin, args.bench_bin),
                "reference-one": lambda: Reference(d, args.ref_bin, args.bench_bin, "one"),
                "redis": lambda: Redis(d), "postgres": lambda: Postgres(d)}
        for name in args.systems.split(","):
            systems.append(make[name]())
        print(f"host: {os.cpu_count()} cpus, {os.uname().release}; {INSTANCES} instances; "
              f"{args.seconds} s per run, {args.rounds} rounds alternated")
        print("| round | system | shape | ops/s | p99 ms | server CPU per op (us) | of it in the "
              "kernel |")
        print("|---:|---|---|---:|---:|---:|---:|")
        for rnd in range(1, args.rounds + 1):
            for shape in args.shapes.split(","):
                for s in systems:
                    pid = getattr(s, "p", None)
                    pid = None if isinstance(s, Postgres) else pid and pid.pid
                    (ops, p99, cpu), ks = (kernel_share(pid, lambda: s.run(shape, args.seconds))
                                           if pid else (s.run(shape, args.seconds), None))
                    kern = f"{ks * 100:.0f}%" if ks is not None else "n/a"
                    print(f"| {rnd} | {s.name} | {shape} | {ops:,.0f} | {p99:.2f} | "
                          f"{cpu:.1f} | {kern} |", flush=True)
    finally:
        for s in systems:
            s.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
