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
from typing import Any, Iterator, List, Sequence, Tuple

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


COUNTER = {"states": ["open"], "initial": "open", "transitions": [{"from": "open", "event": "tick", "to": "open"}]}
#: g1's first third (g1 owns 0-8191 of two groups), moved to g2 under writes.
MOVED = [0, 2730]


def moved(id: str) -> bool:
    return MOVED[0] <= smdb.slot_of(id) <= MOVED[1]


def two_groups(
    tmp_path: pathlib.Path, etcd: str, nodes: Sequence[Tuple[str, str]] = (("g1", "g10"), ("g2", "g20"))
) -> List[Server]:
    """Members ``(group, node)`` of g1 and g2, the map created, ``counter`` put. The last
    member must be its group's only one (a primary): it serves the create and the PUT."""
    members: List[Server] = []
    for g, node in nodes:
        d = tmp_path / node
        d.mkdir()
        members.append(Server(d, member_config(etcd, node, g)))
    direct = smdb.Client("127.0.0.1", members[-1].port)

    def create() -> bool:
        # A just-started etcd may time the first check out (a retryable INTERNAL_ERROR); a
        # create that went through before its answer was lost leaves the map there.
        try:
            direct.call("CLUSTER_CREATE", {"groups": GROUPS[:2], "timeout_ms": 20000})
        except ServerError as e:
            if e.code == "BAD_REQUEST" and "map_epoch" in e.details:
                return True
            if not e.retryable:
                raise
            return False
        return True

    wait_for("CLUSTER_CREATE", create)
    for m in members:
        c = smdb.Client("127.0.0.1", m.port)
        wait_for("the map", lambda c=c: c.call("CLUSTER_INFO", {})["state"] == "ok", 3.0)
        c.close()
    direct.put_machine("counter", 1, COUNTER)
    direct.close()
    return members


def test_batches_split_by_group_and_lists_fan_out(tmp_path: pathlib.Path, etcd: str) -> None:
    members = two_groups(tmp_path, etcd)
    try:
        seed = smdb.Client("127.0.0.1", members[0].port, options=ConnectOptions(retry=RetryPolicy.failover()))
        ids = [f"b-{i}" for i in range(90)]
        for id in ids:
            seed.create_instance("counter", 1, id)
        # A best-effort batch over both groups: each op answered by its owner, in order.
        ops = [smdb.Request("GET_INSTANCE", {"id": id}, safe=True) for id in ids[::3]]
        ops.insert(2, smdb.Request("GET_INSTANCE", {"id": "no-such-id"}, safe=True))
        r = seed.batch(ops)["results"]
        assert len(r) == len(ops)
        assert r[2]["status"] == "error" and r[2]["error"]["code"] != "MOVED", r[2]
        got = [e["result"]["id"] for i, e in enumerate(r) if i != 2]
        assert got == ids[::3], "results in the ops' order, none MOVED"
        assert {smdb.slot_of(i) <= 8191 for i in got} == {True, False}, "both groups were asked"
        # An atomic batch keeps to one slot and goes to that slot's group.
        other = next(i for i in ids if smdb.slot_of(i) > 8191)
        r = seed.batch([smdb.apply_event(other, "tick", {"k": 0})], atomic=True)["results"]
        assert r[0]["status"] == "ok", r
        assert seed.cluster_redirects == 0
        # LIST_INSTANCES over both groups with one combined cursor, pages of up to 7 per group.
        seen: List[str] = []
        cursor = None
        pages = 0
        while True:
            page = seed.list_instances(limit=7, cursor=cursor)
            pages += 1
            listed = [i["id"] for i in page["instances"]]
            assert listed == sorted(listed), "a page is in id order"
            seen += listed
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert cursor.startswith("cluster:")
            groups_in = bytes.fromhex(cursor[len("cluster:"):]).decode()
            assert groups_in.startswith('{"127.0.0.1:'), groups_in
        assert sorted(seen) == sorted(ids) and len(seen) == len(ids), (len(seen), pages)
        assert pages >= 90 // 14
        seed.close()
    finally:
        for m in members:
            m.kill()


def test_watch_all_over_two_groups_keeps_order_across_a_move(tmp_path: pathlib.Path, etcd: str) -> None:
    import threading

    members = two_groups(tmp_path, etcd)
    try:
        opts = ConnectOptions(retry=RetryPolicy.failover())
        seed = smdb.Client("127.0.0.1", members[0].port, options=opts)
        ids = [f"w-{i}" for i in range(60)]
        assert sum(moved(i) for i in ids) > 5
        for id in ids:
            seed.create_instance("counter", 1, id)
        sub = seed.watch_all(events=["tick"])
        assert sub.cursor is not None and sub.cursor.startswith("cluster:")

        stop = threading.Event()
        acked: dict = {id: [] for id in ids}

        def write(w: int) -> None:
            c = smdb.Client("127.0.0.1", members[0].port, options=opts)
            mine = ids[w::3]
            k = 0
            while not stop.is_set():
                k += 1
                for id in mine:
                    c.apply_event(id, "tick", {"k": k}, idempotency_key=f"{id}-{k}")
                    acked[id].append(k)
            c.close()

        writers = [threading.Thread(target=write, args=(w,)) for w in range(3)]
        for t in writers:
            t.start()
        time.sleep(0.7)
        mover = smdb.Client("127.0.0.1", members[0].port)
        done = mover.call("CLUSTER_MOVE_SLOTS", {"slots": MOVED, "to": "g2"})
        assert done["state"] == "done", done
        time.sleep(0.7)
        stop.set()
        for t in writers:
            t.join()
        total = sum(len(v) for v in acked.values())

        got: dict = {}
        deadline = time.monotonic() + 15
        n = 0
        while n < total and time.monotonic() < deadline:
            e = sub.next(timeout=1.0)
            if e is None:
                continue
            got.setdefault(e["instance_id"], []).append((e["payload"]["k"], e.get("group")))
            n += 1
        by_group = {"g1": 0, "g2": 0}
        both = 0
        for id in ids:
            seen = got.get(id, [])
            assert [k for k, _ in seen] == acked[id], f"{id} (slot {smdb.slot_of(id)}): every event once, in order: {seen}"
            for _, g in seen:
                by_group[g] += 1
            if moved(id):
                groups_of = [g for _, g in seen]
                first_g2 = groups_of.index("g2") if "g2" in groups_of else len(groups_of)
                assert all(g == "g2" for g in groups_of[first_g2:]), f"{id}: {groups_of}"
                both += 0 < first_g2 < len(groups_of)
        print(f"{total} events; by group {by_group}; {both} moved instances heard from both")
        assert by_group["g1"] > 0 and by_group["g2"] > 0, by_group
        assert both > 0, "a moved instance was heard from both groups"
        sub.close()
        seed.close()
        mover.close()
    finally:
        for m in members:
            m.kill()


def test_a_killed_group_primary_stalls_only_its_own_group(tmp_path: pathlib.Path, etcd: str) -> None:
    """g1 has two members, g2 one (async mode: g1's survivor takes writes alone). A writer per
    group through one seed; g1's primary is SIGKILLed: g2's writer never fails and keeps being
    answered while g1 has no primary, and g1's writer (idempotency keys) resumes on the new
    primary. Before the routing paced the retries itself, a refused connection to the dead
    primary failed the request at once."""
    import threading

    members = two_groups(tmp_path, etcd, (("g1", "g1-0"), ("g1", "g1-1"), ("g2", "g2-0")))
    try:
        opts = ConnectOptions(retry=RetryPolicy.failover())
        seed = smdb.Client("127.0.0.1", members[2].port, options=opts)
        ids = {g: [] for g in GROUPS[:2]}
        i = 0
        while min(len(v) for v in ids.values()) < 20:
            id = f"k-{i}"
            i += 1
            g = "g1" if smdb.slot_of(id) <= 8191 else "g2"
            if len(ids[g]) < 20:
                seed.create_instance("counter", 1, id)
                ids[g].append(id)
        seed.close()

        stop = threading.Event()
        acks: dict = {g: [] for g in GROUPS[:2]}
        failures: dict = {g: [] for g in GROUPS[:2]}

        def write(g: str) -> None:
            c = smdb.Client("127.0.0.1", members[2].port, options=opts)
            k = 0
            while not stop.is_set():
                k += 1
                id = ids[g][k % 20]
                try:
                    c.apply_event(id, "tick", {"k": k}, idempotency_key=f"{g}-{k}")
                    acks[g].append(time.monotonic())
                except smdb.SmdbError as e:
                    failures[g].append(repr(e))
            c.close()

        writers = [threading.Thread(target=write, args=(g,)) for g in GROUPS[:2]]
        for t in writers:
            t.start()
        time.sleep(1.0)
        roles = [smdb.Client("127.0.0.1", m.port).replication_status()["role"] for m in members[:2]]
        killed = roles.index("primary")
        survivor = members[1 - killed]
        members[killed].kill()
        killed_at = time.monotonic()
        wait_for(
            "g1's survivor takes over",
            lambda: smdb.Client("127.0.0.1", survivor.port).replication_status()["role"] == "primary",
        )
        took_over = time.monotonic()
        time.sleep(2.0)
        stop.set()
        for t in writers:
            t.join()
        assert not failures["g2"], failures["g2"]
        assert any(killed_at < t < took_over for t in acks["g2"]), "g2 kept writing"
        assert any(t > took_over for t in acks["g1"]), f"g1 resumed: {failures['g1']}"
    finally:
        for m in members:
            m.kill()


#: ``item``: COUNTER with an index on ``ctx.kind`` (for FIND_INSTANCES).
ITEM = dict(COUNTER, indexes=["ctx.kind"])


def test_find_scan_migrate_and_delete_fan_out_over_both_groups(tmp_path: pathlib.Path, etcd: str) -> None:
    members = two_groups(tmp_path, etcd)
    try:
        direct = smdb.Client("127.0.0.1", members[-1].port)
        direct.put_machine("item", 1, ITEM)
        seed = smdb.Client("127.0.0.1", members[0].port, options=ConnectOptions(retry=RetryPolicy.failover()))
        ids = sorted(f"f-{i}" for i in range(80))
        for id in ids:
            seed.create_instance("item", 1, id, {"kind": "k"})
        assert {smdb.slot_of(i) <= 8191 for i in ids} == {True, False}, "both groups hold some"
        # FIND and SCAN through one seed: every match once, from both groups, paged with a
        # small limit (at most 7 per group a page), one combined cursor.
        for op in ("find", "scan"):
            seen: List[str] = []
            cursor = None
            while True:
                call = seed.find_instances if op == "find" else seed.scan_instances
                page = call("item", {"ctx.kind": "k"}, limit=7, cursor=cursor)
                assert len(page["instances"]) <= 14, page
                seen += [i["id"] for i in page["instances"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
                assert cursor.startswith("cluster:"), cursor
            assert sorted(seen) == ids and len(seen) == len(ids), (op, len(seen))
        assert seed.find_instances("item", {"ctx.kind": "k"}, limit=1)["versions"] == [1]
        # MIGRATE through the client: every group called until done, the counts summed.
        direct.put_machine("item", 2, ITEM)
        calls: List[Any] = []
        total = seed.migrate_to_end("item", 1, 2, limit=10, on_call=calls.append)
        assert total["migrated"] == len(ids) and total["remaining"] == 0, total
        assert total["cursor"] is None and len(calls) >= 4, (total, len(calls))
        assert all(i["version"] == 2 for i in seed.list_instances(machine="item", limit=1000)["instances"])
        # DELETE: a dry run sums both groups, the walk deletes every instance once.
        dry = seed.delete_instances("item", dry_run=True)
        assert dry["would_delete"] == {"open": len(ids)}, dry
        gone = seed.delete_to_end("item", limit=10)
        assert gone["deleted"] == len(ids) and gone["remaining"] == 0, gone
        assert seed.list_instances(machine="item")["instances"] == []
        seed.close()
        direct.close()
    finally:
        for m in members:
            m.kill()
