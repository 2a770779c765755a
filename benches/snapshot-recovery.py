#!/usr/bin/env python3
"""benches/snapshot-recovery.py: issue 36's restart figure. Fills a server with --instances
instances and --events events each (`smdb-bench --fill`), runs APPLY_EVENT load until the log
holds at least --tail x snapshot_every_entries entries after the newest snapshot, SIGKILLs it,
then restarts it --repeat times with the page cache dropped and --repeat times warm, timing
from the exec to the first successful GET_INSTANCE of a pre-kill instance (and printing the
server's own "recovered" line). Needs root for /proc/sys/vm/drop_caches. With --alt-env
KEY=VALUE every restart is run twice, alternated: without and with that variable in the
server's environment (an A/B of a setting on one data dir).

    python3 benches/snapshot-recovery.py --server target/release/smdb-server \
        --bench target/release/smdb-bench --instances 1000000 --events 3
"""
import argparse, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(__file__))
import rcp1  # noqa: E402


def newest_snapshot(data):
    d = os.path.join(data, "shard-0", "snapshots")
    offs = [int(n[:20]) for n in os.listdir(d) if n.endswith(".snap")] if os.path.isdir(d) else []
    return max(offs, default=0)


def head(c):
    return sum(s["wal_offset"] for s in c.call("INFO", {})["shard_details"])


def wait_listening(p, log_path):
    for _ in range(30000):
        if p.poll() is not None:
            raise RuntimeError("server exited: " + open(log_path).read()[-2000:])
        time.sleep(0.001)
        try:
            with open(log_path + ".out") as f:
                if "listening on" in f.read():
                    return
        except FileNotFoundError:
            pass
    raise RuntimeError("server did not start")


def start(server, cfg, log_path, env=None):
    out = open(log_path + ".out", "w")
    err = open(log_path, "w")
    return subprocess.Popen([server, "--config", cfg], stdout=out, stderr=err, env=env)


def first_get(addr, ident, t0, limit=60.0):
    """Seconds from t0 to the first successful GET_INSTANCE of `ident`."""
    host, port = addr.rsplit(":", 1)
    while time.monotonic() - t0 < limit:
        try:
            c = rcp1.Conn(addr)
            c.call("GET_INSTANCE", {"id": ident})
            return time.monotonic() - t0
        except (OSError, RuntimeError):
            time.sleep(0.002)
    raise RuntimeError("no answer")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--instances", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=3)
    ap.add_argument("--every", type=int, default=400_000)
    ap.add_argument("--tail", type=float, default=0.96)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parent", default="/tmp")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--alt-env", default=None, help="KEY=VALUE: A/B each restart with it")
    a = ap.parse_args()
    port = 20000 + os.getpid() % 20000
    addr = f"127.0.0.1:{port}"
    top = tempfile.mkdtemp(prefix="smdb-snaprec-", dir=a.parent)
    data = os.path.join(top, "data")
    cfg = os.path.join(top, "smdb.toml")
    with open(cfg, "w") as f:
        f.write(f'[network]\nbind_addr = "{addr}"\n[storage]\ndata_dir = "{data}"\n'
                f"snapshot_every_entries = {a.every}\n[metrics]\nenabled = false\n"
                "[http]\nenabled = false\n")
    log = os.path.join(top, "fill.err")
    p = start(a.server, cfg, log)
    wait_listening(p, log)
    subprocess.run([a.bench, "--addr", addr, "--server-pid", str(p.pid), "--fill",
                    "--instances", str(a.instances), "--events-per-instance", str(a.events),
                    "-c", "4", "--in-flight", "64"], check=True, stdout=subprocess.DEVNULL)
    c = rcp1.Conn(addr)
    ident = c.call("LIST_INSTANCES", {"limit": 1})["instances"][0]["id"]
    load = subprocess.Popen([a.bench, "--addr", addr, "--workload", "apply", "-c", "16",
                             "--in-flight", "8", "--duration", "600", "--warmup", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    want = int(a.tail * a.every)
    while True:
        h, s = head(c), newest_snapshot(data)
        if s > 0 and h - s >= want:
            os.kill(p.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    load.kill()
    p.wait()
    load.wait()
    h_seen = h
    print(json.dumps({"instances": a.instances, "events_each": a.events, "head_at_kill_about": h_seen,
                      "newest_snapshot": s, "tail_entries_about": h_seen - s,
                      "snapshot_bytes": os.path.getsize(os.path.join(
                          data, "shard-0", "snapshots", f"{s:020}.snap"))}))
    arms = [(None, None)]
    if a.alt_env:
        key, _, value = a.alt_env.partition("=")
        arms.append((a.alt_env, dict(os.environ, **{key: value})))
    for cold, (label, env) in [(c, arm) for c in [True] * a.repeat + [False] * a.repeat
                               for arm in arms]:
        if cold:
            subprocess.run(["sync"], check=True)
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        log = os.path.join(top, "restart.err")
        t0 = time.monotonic()
        p = start(a.server, cfg, log, env)
        took = first_get(addr, ident, t0)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        rec = re.findall(r"shard recovered .*", open(log).read())
        print(json.dumps({"cache": "dropped" if cold else "warm", "env": label,
                          "first_get_s": round(took, 3), "server": rec}))
    if not a.keep:
        shutil.rmtree(top)
    else:
        print("kept", top)


if __name__ == "__main__":
    main()
