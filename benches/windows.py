#!/usr/bin/env python3
"""benches/windows.py: half-second throughput windows of a running server (issue 36's
"background writes do not dip the foreground" figure).

Polls INFO every 0.5 s and turns the growth of the log's offset (sum over shards) into entries
per second per window. It waits until the offset passes --start (the load's set-up, e.g. the
pre-created instances), then --skip seconds (the bench's warm-up), then samples --windows
windows. Prints one JSON line: the median rate, how many windows fell below 0.9 x the median,
the lowest, and every window's rate.

    python3 benches/windows.py --addr 127.0.0.1:7401 --start 1000001 --skip 2 --windows 60
"""
import argparse, json, statistics, sys, time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rcp1  # noqa: E402


def offset(c):
    info = c.call("INFO", {})
    return sum(s.get("wal_offset", 0) for s in info.get("shard_details", []))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--start", type=int, default=0, help="wait until the offset passes this")
    ap.add_argument("--skip", type=float, default=2.0, help="then wait these seconds")
    ap.add_argument("--windows", type=int, default=60)
    ap.add_argument("--every", type=float, default=0.5, help="window length, seconds")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    for _ in range(6000):
        try:
            c = rcp1.Conn(a.addr)
            break
        except OSError:
            time.sleep(0.05)
    while offset(c) <= a.start:
        time.sleep(0.05)
    time.sleep(a.skip)
    rates = []
    t_prev, o_prev = time.monotonic(), offset(c)
    next_at = t_prev + a.every
    while len(rates) < a.windows:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at += a.every
        t, o = time.monotonic(), offset(c)
        rates.append((o - o_prev) / (t - t_prev))
        t_prev, o_prev = t, o
    med = statistics.median(rates)
    low = [r for r in rates if r < 0.9 * med]
    print(json.dumps({"label": a.label, "windows": len(rates), "median": round(med),
                      "below_0_9": len(low), "min": round(min(rates)),
                      "rates": [round(r) for r in rates]}))


if __name__ == "__main__":
    main()
