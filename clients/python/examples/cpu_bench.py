"""The asyncio client's own CPU per APPLY_EVENT, without a server or a socket: IN_FLIGHT tasks
call ``apply_event`` on one connection whose transport answers every write, on the next loop
turn, with canned ok responses. What is left out is the kernel (send/recv/epoll) and the
server; the fake server's own cost is measured apart and subtracted.

    python3 cpu_bench.py [OPS] [IN_FLIGHT]

Compare builds by alternating runs and taking the minimum (benches/RESULTS.md, session 8).
"""

import asyncio
import json
import sys
import time

import smdb
from smdb import _frame, aio
from smdb._conn import _Conn

try:
    from smdb._speedups import crc32c as _crc  # the fake server's CRC: fast wherever it can be
except ImportError:
    _crc = smdb.crc32c

RESULT = json.dumps(
    {"instance_id": "pb-1-1", "from_state": "s", "to_state": "s", "wal_offset": 123456, "event": "tick", "applied": True},
    separators=(",", ":"),
).encode()


def answers(data: bytes) -> bytes:
    """One ok response per request frame in ``data`` (the ids found by a byte search)."""
    out = []
    at = 0
    while True:
        k = data.find(b'"id":"', at)
        if k < 0:
            break
        e = data.index(b'"', k + 6)
        p = b'{"type":"response","id":"' + data[k + 6 : e] + b'","status":"ok","result":' + RESULT + b"}"
        out.append(b"RCP1\0\0\0\0" + len(p).to_bytes(4, "big") + _crc(p).to_bytes(4, "big") + p)
        at = e
    return b"".join(out)


async def main() -> None:
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 40000
    in_flight = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    loop = asyncio.get_running_loop()
    conn = _Conn(loop, 30.0)

    class Transport:
        def write(self, data: bytes) -> None:
            loop.call_soon(conn.data_received, answers(data))

        def is_closing(self) -> bool:
            return False

        def set_write_buffer_limits(self, high: int) -> None:
            pass

    conn.connection_made(Transport())  # type: ignore[arg-type]
    c = aio.Client("fake", 0, aio.ConnectOptions())
    c._conn = conn
    payload = {"p": "x" * 64}
    ids = [f"pb-1-{i}" for i in range(1000)]

    async def worker(k: int) -> None:
        i = k
        for _ in range(ops // in_flight):
            await c.apply_event(ids[i % 1000], "tick", payload)
            i += in_flight

    t0 = time.process_time()
    await asyncio.gather(*(worker(k) for k in range(in_flight)))
    total = time.process_time() - t0
    batch = b"".join(
        _frame.encode_frame(f'{{"type":"request","op":"APPLY_EVENT","id":"{i}","params":{{}}}}'.encode())
        for i in range(in_flight)
    )
    t0 = time.process_time()
    for _ in range(ops // in_flight):
        answers(batch)
    fake = time.process_time() - t0
    done = ops // in_flight * in_flight
    print(
        f"client CPU per APPLY_EVENT ({getattr(smdb, 'CRC32C_IMPLEMENTATION', 'python')} CRC32C, {in_flight} in flight, no socket): "
        f"{(total - fake) / done * 1e6:.2f} us (fake server {fake / done * 1e6:.2f} us subtracted)"
    )


if __name__ == "__main__":
    asyncio.run(main())
