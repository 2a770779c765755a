"""Throughput of the asyncio client: APPLY_EVENT with N requests in flight on one connection
(N coroutines sharing one client), from one process. Compare with
``smdb-bench --connections 1 --in-flight 8`` against the same server (benches/RESULTS.md).
Also prints the client's own cost: this process's CPU time (user + system, so the socket
syscalls count) per APPLY_EVENT over the counted seconds.

    python3 bench.py [HOST:PORT] [SECONDS] [IN_FLIGHT] [INSTANCES]
"""

import asyncio
import os
import sys
import time

import smdb
from smdb import aio

TICK = {"states": ["s"], "initial": "s", "transitions": [{"from": "s", "event": "tick", "to": "s"}]}


async def main() -> None:
    addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7401"
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    in_flight = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    instances = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    host, port = addr.rsplit(":", 1)
    c = await aio.Client.connect(host, int(port), client_name="python-bench")
    await c.put_machine("py-bench", 1, TICK)
    run = os.getpid()
    ids = [f"pb-{run}-{i}" for i in range(instances)]
    for r in await c.pipeline([smdb.create_instance("py-bench", 1, i) for i in ids]):
        if isinstance(r, Exception):
            raise r
    payload = {"p": "x" * 64}  # what smdb-bench sends by default
    warm_until = time.monotonic() + 1.0
    end = warm_until + secs
    done = 0
    cpu = [0.0, 0.0]

    async def worker(k: int) -> None:
        nonlocal done
        i = k
        while True:
            now = time.monotonic()
            if now >= end:
                return
            await c.apply_event(ids[i % instances], "tick", payload)
            if now >= warm_until:
                done += 1
            i += in_flight

    async def clock() -> None:
        await asyncio.sleep(max(0.0, warm_until - time.monotonic()))
        cpu[0] = time.process_time()
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        cpu[1] = time.process_time()

    await asyncio.gather(clock(), *(worker(k) for k in range(in_flight)))
    await c.close()
    us = (cpu[1] - cpu[0]) / max(done, 1) * 1e6
    print(
        f"python asyncio client: APPLY_EVENT, {in_flight} in flight on 1 connection, "
        f"{secs:.0f} s: {done} ops, {done / secs:.0f} ops/s, {us:.1f} us of client CPU per op "
        f"({(cpu[1] - cpu[0]) / secs * 100:.0f}% of one core)"
    )


if __name__ == "__main__":
    asyncio.run(main())
