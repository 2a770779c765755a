"""The cluster fan-out's parts without a socket (``smdb._fanout``, ``smdb._watch``), as the Rust
client's unit tests have them (``clients/rust/src/fanout.rs``, ``watch_fanout.rs``)."""

from __future__ import annotations

import pytest

from smdb import _fanout
from smdb._cluster import SlotMap
from smdb._watch import Order, cursor_shards, groups
from smdb.errors import ServerError

SHARDS = {"map_epoch": 1, "shards": [
    {"group": "g1", "slots": [[0, 8191]], "primary": "a", "nodes": [{"node_id": "a", "addr": "h:1"}]},
    {"group": "g2", "slots": [[8192, 16383]], "primary": "b", "nodes": [{"node_id": "b", "addr": "h:2"}]}]}


def test_a_batch_splits_by_primary_and_comes_back_in_order() -> None:
    # slot("hello") = 866 (g1), slot("foo") = 12182 (g2).
    ops = [{"op": "GET_INSTANCE", "params": {"id": i}} for i in ("foo", "hello", "{foo}:x")]
    parts = _fanout.split_batch(SlotMap(SHARDS), ops)
    assert parts == [("h:2", [0, 2]), ("h:1", [1])]
    ok = lambda r: {"status": "ok", "result": r}  # noqa: E731
    r = _fanout.reassemble(3, [([0, 2], {"results": [ok(0), ok(2)]}), ([1], ServerError("x", code="TRYAGAIN"))])
    assert r["results"][0] == ok(0) and r["results"][2] == ok(2)
    assert r["results"][1]["error"]["code"] == "TRYAGAIN"


def test_the_combined_cursor_is_the_rust_client_s() -> None:
    m = SlotMap(SHARDS)
    assert _fanout.cursors(m, None) == {"h:1": None, "h:2": None}
    merged = _fanout.merge_pages([
        ("h:1", {"instances": [{"id": "b"}, {"id": "d"}], "next_cursor": "c1"}),
        ("h:2", {"instances": [{"id": "a"}, {"id": "c"}], "next_cursor": None})])
    assert [i["id"] for i in merged["instances"]] == ["a", "b", "c", "d"]
    # `cluster:` then the hex of the compact JSON, as clients/rust/src/fanout.rs writes it.
    assert merged["next_cursor"] == "cluster:" + b'{"h:1":"c1"}'.hex()
    assert _fanout.cursors(m, merged["next_cursor"]) == {"h:1": "c1"}
    with pytest.raises(ValueError):
        _fanout.cursors(m, "plain")
    assert _fanout.merge_pages([("h:1", {"instances": [], "next_cursor": None})])["next_cursor"] is None


def test_a_moved_slot_s_events_wait_for_the_source_s_slots_moved() -> None:
    _, gs = groups(SHARDS)
    o = Order(gs)
    o.saw("g1", "c1-0-0")
    o.saw("g2", "c1-0")
    assert cursor_shards("c2-1.3-2.4") == 2 and cursor_shards("0") is None
    assert cursor_shards("c2-1.3-2.4@g-1") == 2
    ev = lambda id, n: {"instance_id": id, "n": n}  # noqa: E731
    assert o.event("g1", ev("hello", 1)) and o.event("g2", ev("foo", 1))
    assert o.event("g2", ev("hello", 5)) is None and o.event("g2", ev("hello", 6)) is None
    assert o.event("g1", ev("hello", 2)) is not None
    assert o.holds("g2") and not o.holds("g1")
    # Shard 1 of g1's two does not hold slot 866: nothing released yet.
    assert o.moved("g1", {"slots": [800, 900], "to": "g2", "shard": 1}) == []
    assert [e["n"] for e in o.moved("g1", {"slots": [800, 900], "to": "g2", "shard": 0})] == [5, 6]
    assert o.event("g2", ev("hello", 7)) is not None
    # After a reopen the fresh map hands over slots whose slots_moved was lost, once the
    # reopened group's replay of their shard is over (a live push), or the wait ends.
    now = [("g1", "h:1", [(0, 799), (901, 8191)]), ("g2", "h:2", [(800, 900), (8192, 16383)])]
    for end in ("live", "expire"):
        o2 = Order(gs)
        o2.saw("g1", "c1-0-0")
        o2.saw("g2", "c1-0")
        assert o2.event("g2", ev("hello", 5)) is None
        o2.reopened("g1", now)
        assert o2.event("g1", ev("hello", 4)) is not None  # replayed, older: still first
        if end == "live":
            assert o2.live("g1", 1) == []  # slot 866 is shard 0's of two
            assert len(o2.live("g1", 0)) == 1
        else:
            assert len(o2.expire("g1")) == 1
        assert not o2.holds("g2")
