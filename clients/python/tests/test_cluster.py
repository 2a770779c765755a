"""The Python client in cluster mode against real processes (docs/cluster.md, "Clients"): one
etcd and three groups of one member each, as ``tests/cluster_client.rs`` has them for the Rust
client. A client given ONE seed sees ``"cluster"`` in HELLO's features, reads the map with
``CLUSTER_SHARDS`` and sends every instance op straight to its slot's group primary: 150
creates, events and reads with no error and no ``MOVED``, and each instance is on its slot's
group primary. Skipped when etcd is not installed (the CI installs it)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import time
from typing import Iterator, List

import pytest

import smdb
from smdb import ConnectOptions, RetryPolicy
from smdb.errors import ServerError

from conftest import ORDER, Server, free_port

GROUPS = ["g1", "g2", "g3"]


@pytest.fixture
def etcd(tmp_path: pathlib.Path) -> Iterator[str]:
    binary = shutil.which("etcd") or ("/usr/sbin/etcd" if pathlib.Path("/usr/sbin/etcd").exists() else None)
    if binary is None:
        pytest.skip("etcd is not installed (Debian package etcd-server)")
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    log = open(tmp_path / "etcd.log", "ab")
    proc = subprocess.Popen(
        [binary, "--name", "e0", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", f"e0={peer}", "--initial-cluster-state", "new",
         "--heartbeat-interval", "50", "--election-timeout", "500"],
        stdout=subprocess.DEVNULL, stderr=log,
    )
    try:
        yield client.removeprefix("http://")
    finally:
        proc.kill()
        proc.wait()


def member_config(etcd: str, node: str, group: str) -> str:
    return (
        '[shards]\ncount = 1\n[replication]\nmode = "async"\nheartbeat_ms = 200\nreconnect_max_ms = 500\n'
        + f'[ha]\nenabled = true\nnode_id = "{node}"\ncluster = "py"\netcd_endpoints = ["{etcd}"]\n'
        + "ttl_ms = 2000\nsafety_margin_ms = 500\n"
        + f'[cluster]\nenabled = true\ngroup = "{group}"\n'
    )


def wait_for(what: str, check, within: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while True:
        try:
            if check():
                return
        except (ServerError, smdb.ConnectionLost):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(0.1)


def test_one_seed_routes_every_instance_op_to_its_slot_s_primary(tmp_path: pathlib.Path, etcd: str) -> None:
    members: List[Server] = []
    try:
        for g in GROUPS:
            d = tmp_path / g
            d.mkdir()
            members.append(Server(d, member_config(etcd, f"{g}0", g)))
        direct = [smdb.Client("127.0.0.1", m.port) for m in members]
        # CLUSTER_CREATE waits (up to timeout_ms) for every named group's primary.
        created = direct[0].call("CLUSTER_CREATE", {"groups": GROUPS, "timeout_ms": 20000})
        assert created["map_epoch"] == 1
        for c in direct:
            wait_for("the map", lambda c=c: c.call("CLUSTER_INFO", {})["state"] == "ok", 3.0)
            c.put_machine("order", 1, ORDER)

        seed = smdb.Client("127.0.0.1", members[1].port, options=ConnectOptions(retry=RetryPolicy.failover()))
        assert seed.is_cluster
        assert seed.cluster_map_epoch == 1
        ids = [f"p-{i}" for i in range(150)]
        for id in ids:
            seed.create_instance("order", 1, id, {"total": 1})
            seed.apply_event(id, "pay", {"amount": 1})
            assert seed.get_instance(id)["state"] == "paid"
        assert seed.cluster_redirects == 0

        found = {g: 0 for g in GROUPS}
        for g, c in zip(GROUPS, direct):
            for id in ids:
                try:
                    c.call("GET_INSTANCE", {"id": id})  # raw: no routing
                    found[g] += 1
                except ServerError as e:
                    assert e.code == "MOVED", e
        assert sum(found.values()) == 150, found
        assert all(30 <= n <= 70 for n in found.values()), found
        seed.close()
        for c in direct:
            c.close()
    finally:
        for m in members:
            m.kill()
