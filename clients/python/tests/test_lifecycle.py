"""MIGRATE_INSTANCES and DELETE_INSTANCES through the Python client (asyncio and sync) against
the real server binary: dry runs, one call, and the drivers that go call after call by cursor."""

from __future__ import annotations

import asyncio

import pytest

import smdb
from smdb import aio

# v1 new → open → paused; v2 renames ``open`` to ``active`` and has no ``paused``.
JOB_V1 = {"states": ["new", "open", "paused"], "initial": "new", "transitions": [
    {"from": "new", "event": "go", "to": "open"},
    {"from": "open", "event": "pause", "to": "paused"}]}
JOB_V2 = {"states": ["new", "active"], "initial": "new", "transitions": [
    {"from": "new", "event": "go", "to": "active"}]}


def fill(c: smdb.Client) -> None:
    """5 instances in each v1 state: n0.., o0.., p0.., with ``ctx.tier`` free or paid."""
    c.put_machine("job", 1, JOB_V1)
    c.put_machine("job", 2, JOB_V2)
    for i in range(5):
        for prefix, events in (("n", []), ("o", ["go"]), ("p", ["go", "pause"])):
            id = f"{prefix}{i}"
            c.create_instance("job", 1, id, {"tier": "free" if i % 2 == 0 else "paid"})
            for ev in events:
                c.apply_event(id, ev)


def test_sync_migrate_and_delete_run_to_the_end(make_server):
    server = make_server("[shards]\ncount = 2\n")
    with smdb.Client("127.0.0.1", server.port) as c:
        fill(c)
        dry = c.migrate_instances("job", 1, 2, states={"open": "active"}, dry_run=True)
        assert dry == {"would_migrate": {"new": 5, "open": 5}, "skipped": {"no_state": 5}, "examined": 15}
        replies = list(c.migrate_pages("job", 1, 2, states={"open": "active"}, limit=4))
        assert len(replies) >= 3 and replies[-1]["cursor"] is None
        assert sum(r["migrated"] for r in replies) == 10
        assert (c.get_instance("o1")["version"], c.get_instance("o1")["state"]) == (2, "active")
        assert c.get_instance("p1")["version"] == 1

        seen = []
        total = c.delete_to_end("job", where={"ctx.tier": "free"}, limit=4, on_call=seen.append)
        assert total["deleted"] == 9 and total["cursor"] is None and len(seen) >= 3
        assert total["examined"] == sum(r["examined"] for r in seen) == 15
        with pytest.raises(smdb.ServerError) as e:
            c.get_instance("n0")
        assert e.value.code == "INSTANCE_NOT_FOUND"
        assert c.get_instance("n1")["state"] == "new"


def test_async_drivers_resume_from_a_cursor(make_server):
    server = make_server("[shards]\ncount = 2\n")
    with smdb.Client("127.0.0.1", server.port) as c:
        fill(c)

    async def main():
        c = await aio.Client.connect("127.0.0.1", server.port)
        first = await c.migrate_instances("job", 1, 2, states={"open": "active"}, limit=2)
        assert first["cursor"] is not None and first["remaining"] > 0
        calls = []
        rest = await c.migrate_to_end("job", 1, 2, states={"open": "active"}, limit=2,
                                      cursor=first["cursor"], on_call=calls.append)
        assert first["migrated"] + rest["migrated"] == 10
        assert rest["skipped"]["no_state"] + first["skipped"].get("no_state", 0) == 5
        assert len(calls) >= 2 and rest["cursor"] is None and rest["remaining"] == 0
        one = await c.migrate_instances("job", 1, 2, states={"paused": "active"}, where={"id": "p3"})
        assert one["migrated"] == 1
        dry = await c.delete_instances("job", state="paused", dry_run=True)
        assert dry["would_delete"] == {"paused": 4}
        pages = [r async for r in c.delete_pages("job", state="paused", limit=4)]
        assert sum(r["deleted"] for r in pages) == 4
        none = await c.delete_to_end("job", updated_before="1970-01-02T00:00:00Z")
        assert none["deleted"] == 0
        assert (await c.get_instance("p3"))["state"] == "active"
        await c.close()

    asyncio.run(main())
