"""Cluster mode's slots and routing on the client side (docs/cluster.md "Slots" and
"Clients"): the contract's vectors, the op keys and the map's lookups. No server."""

from smdb import crc16_xmodem, routing_key, slot_of
from smdb._cluster import SlotMap, route_key


def test_the_contract_s_vectors() -> None:
    assert crc16_xmodem(b"123456789") == 0x31C3
    vectors = {
        "123456789": 12739,
        "foo": 12182,
        "hello": 866,
        "{user1000}.following": 3443,
        "{user1000}.followers": 3443,
        "foo{}{bar}": 8363,
        "foo{{bar}}zap": 4015,
        "foo{bar}{zap}": 5061,
        "{o-7}": 340,
        "{o-7}:pay": 340,
        "o-7": 340,
        "é": 10180,
    }
    for id, slot in vectors.items():
        assert slot_of(id) == slot, id
    assert routing_key("foo{{bar}}zap") == b"{bar"
    assert routing_key("foo{}{bar}") == b"foo{}{bar}"


def test_instance_ops_route_by_instance_id_then_id() -> None:
    assert route_key("GET_INSTANCE", {"id": "a"}) == "a"
    assert route_key("APPLY_EVENT", {"instance_id": "b", "event": "go"}) == "b"
    assert route_key("PUT_MACHINE", {"machine": "m"}) is None
    assert route_key("LIST_INSTANCES", {}) is None


def test_the_map_names_each_slot_s_primary() -> None:
    m = SlotMap({"map_epoch": 3, "shards": [
        {"group": "g1", "slots": [[0, 99], [200, 16383]], "primary": "n1",
         "nodes": [{"node_id": "n1", "addr": "h1:1"}, {"node_id": "n2", "addr": "h2:1"}]},
        {"group": "g2", "slots": [[100, 199]], "primary": None, "nodes": []}]})
    assert m.map_epoch == 3
    assert m.primary_of(0) == "h1:1"
    assert m.primary_of(99) == "h1:1"
    assert m.primary_of(100) is None
    assert m.primary_of(16383) == "h1:1"
    assert SlotMap({}).primary_of(5) is None
