"""Failover across several addresses (docs/ha.md, "Clients") against real processes: a
one-member etcd on loopback (Debian ``etcd-server``; the test fails without it) and three smdb
members in sync mode. A client given every address, a follower's first, follows the primary,
rides out a SIGKILL of it, and every create it saw acknowledged is on the new primary."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import subprocess
import time
from typing import List, Optional

import pytest

import smdb
from smdb import aio
from smdb.client import parse_addresses
from conftest import ORDER, Server, free_port

TTL_MS = 2000


def test_addresses_parse_with_default_ports():
    assert parse_addresses("a:1, b:2,c") == [("a", 1), ("b", 2), ("c", 7401)]
    assert parse_addresses("[::1]:9") == [("::1", 9)]


class Etcd:
    def __init__(self, tmp: pathlib.Path) -> None:
        binary = shutil.which("etcd") or "/usr/bin/etcd"
        if not pathlib.Path(binary).is_file():
            pytest.fail("etcd is not installed: apt-get install -y etcd-server")
        self.client, peer = free_port(), free_port()
        c, p = f"http://127.0.0.1:{self.client}", f"http://127.0.0.1:{peer}"
        self.proc = subprocess.Popen(
            [binary, "--name", "e0", "--data-dir", str(tmp / "etcd"), "--listen-client-urls", c,
             "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", f"e0={p}", "--heartbeat-interval", "50", "--election-timeout", "500"],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "etcd.log", "wb"),
        )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def member_config(etcd: Etcd, node: str) -> str:
    return (
        '[replication]\nmode = "sync"\nheartbeat_ms = 200\nreconnect_max_ms = 500\n'
        f'[ha]\nenabled = true\nnode_id = "{node}"\ncluster = "py"\n'
        f'etcd_endpoints = ["127.0.0.1:{etcd.client}"]\nttl_ms = {TTL_MS}\nsafety_margin_ms = 500\n'
    )


async def role(port: int) -> Optional[str]:
    try:
        c = await aio.Client.connect("127.0.0.1", port, retry=smdb.RetryPolicy(attempts=1), timeout=5)
    except smdb.SmdbError:
        return None
    try:
        return (await c.replication_status())["role"]
    except smdb.SmdbError:
        return None
    finally:
        await c.close()


async def one_primary(members: List[Server], limit: float) -> int:
    deadline = time.monotonic() + limit
    while True:
        roles = [await role(m.port) if m.proc is not None else "down" for m in members]
        if roles.count("primary") == 1:
            return roles.index("primary")
        assert time.monotonic() < deadline, f"no single primary within {limit} s: {roles}"
        await asyncio.sleep(0.1)


def test_a_client_with_every_address_follows_the_primary_across_a_sigkill(tmp_path):
    etcd = Etcd(tmp_path)
    members: List[Server] = []
    try:
        for i in range(3):
            d = tmp_path / f"n{i}"
            d.mkdir()
            members.append(Server(d, member_config(etcd, f"n{i}")))
        asyncio.run(scenario(members))
    finally:
        for m in members:
            m.kill()
        etcd.kill()


async def scenario(members: List[Server]) -> None:
    first = await one_primary(members, 30)
    follower = (first + 1) % 3
    # Every address, a follower's first: the first write is redirected to the primary.
    order = [follower, first, (first + 2) % 3]
    addrs = ",".join(f"127.0.0.1:{members[i].port}" for i in order)
    c = await aio.Client.connect(addrs, retry=smdb.RetryPolicy.failover(), timeout=10)
    assert c.port == members[follower].port
    await c.put_machine("order", 1, ORDER)
    assert c.port == members[first].port, "PUT_MACHINE went on to the primary"
    acked: List[str] = []
    killed_at: Optional[float] = None
    after = 0
    n = 0
    deadline = time.monotonic() + 60
    while after < 30:
        assert time.monotonic() < deadline, f"writes did not resume: {len(acked)} acknowledged"
        iid = f"py-{n}"
        n += 1
        await c.create_instance("order", 1, iid, {"total": 1}, idempotency_key=iid)
        acked.append(iid)
        if killed_at is None and len(acked) == 30:
            members[first].kill()
            killed_at = time.monotonic()
        elif killed_at is not None:
            after += 1
    gap = time.monotonic() - (killed_at or 0)
    second = await one_primary(members, 20)
    assert second != first
    assert c.port == members[second].port, "the client is on the new primary"
    assert c.connects >= 3, c.connects
    check = await aio.Client.connect("127.0.0.1", members[second].port)
    for iid in acked:
        got = await check.get_instance(iid)
        assert got["id"] == iid, f"acknowledged {iid} is missing on the new primary"
    await check.close()
    await c.close()
    print(f"{len(acked)} creates acknowledged; writes resumed within {gap:.1f} s of the SIGKILL")
