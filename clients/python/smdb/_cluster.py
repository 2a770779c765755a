"""Cluster mode on the client side (docs/cluster.md, "Clients"), as the Rust client's
``cluster`` module: the slot of an id (CRC16/XMODEM with the hash-tag rule), the slot map read
from ``CLUSTER_SHARDS``, and the routing of instance ops to their slot's group primary.

A client whose seed's HELLO lists the ``"cluster"`` feature reads the map and sends each
instance op to its slot's group primary, over one client per primary opened on first use with
the seed's options, so each retries as the failover rules say (``TRYAGAIN``, ``CLUSTERDOWN``
and ``NO_PRIMARY`` with backoff). On ``MOVED`` the request goes at once to ``details.addr``
and the map is read again (at most once per 100 ms); a ``CLUSTERDOWN`` or ``NO_PRIMARY`` that
outlasts the retries reads the map again and resends when it names another primary. A request
follows at most ``MAX_REDIRECTS`` such redirects, then raises the last error."""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .errors import ServerError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

SLOT_COUNT = 16384
MAX_REDIRECTS = 5
REFRESH_EVERY = 0.1

#: The ops that route by instance (the op table's ``Route::Instance``), keyed by
#: ``instance_id``, else ``id``.
INSTANCE_OPS = frozenset({"CREATE_INSTANCE", "GET_INSTANCE", "DELETE_INSTANCE", "APPLY_EVENT", "GET_HISTORY"})


def crc16_xmodem(data: bytes) -> int:
    """CRC-16/XMODEM: polynomial 0x1021, initial 0, no reflection, no final xor."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def routing_key(id: str) -> bytes:
    """The hash tag rule (Redis Cluster's): the bytes between the first ``{`` and the first
    ``}`` after it, when there is at least one; else the whole id."""
    raw = id.encode("utf-8")
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            return raw[start + 1 : end]
    return raw


def slot_of(id: str) -> int:
    return crc16_xmodem(routing_key(id)) % SLOT_COUNT


def route_key(op: str, params: Optional[Dict[str, Any]]) -> Optional[str]:
    """The id an instance op routes by, or None for ops that go to the seed."""
    if op not in INSTANCE_OPS or not isinstance(params, dict):
        return None
    key = params.get("instance_id", params.get("id"))
    return key if isinstance(key, str) else None


class SlotMap:
    """Which group primary serves each slot, as one ``CLUSTER_SHARDS`` answer had it."""

    def __init__(self, shards: Optional[Dict[str, Any]] = None) -> None:
        shards = shards or {}
        self.map_epoch: int = int(shards.get("map_epoch") or 0)
        ranges: List[Tuple[int, int, Optional[str]]] = []
        for g in shards.get("shards") or []:
            primary = g.get("primary")
            addr = next((n.get("addr") for n in g.get("nodes") or [] if n.get("node_id") == primary), None)
            for r in g.get("slots") or []:
                ranges.append((int(r[0]), int(r[1]), addr if isinstance(addr, str) else None))
        ranges.sort()
        self._ranges = ranges
        self._los = [r[0] for r in ranges]

    def primary_of(self, slot: int) -> Optional[str]:
        i = bisect.bisect_right(self._los, slot) - 1
        if i < 0:
            return None
        lo, hi, addr = self._ranges[i]
        return addr if slot <= hi else None

    def primaries(self) -> List[str]:
        """Every primary address of the map, each once, in order."""
        return sorted({r[2] for r in self._ranges if r[2] is not None})


class Routing:
    """What a cluster client keeps beside its seed connection."""

    def __init__(self) -> None:
        self.map = SlotMap()
        self.members: Dict[str, "Client"] = {}
        self.moved = 0
        self._last_refresh = 0.0

    async def reload(self, seed: "Client") -> None:
        """Reads the map from the seed (kept as is when that fails)."""
        try:
            self.map = SlotMap(await seed._direct("CLUSTER_SHARDS", {}, safe=True))
        except Exception:  # noqa: BLE001 - the next requests' errors say why
            pass

    def refresh_due(self) -> bool:
        now = time.monotonic()
        if now - self._last_refresh < REFRESH_EVERY:
            return False
        self._last_refresh = now
        return True

    async def member(self, seed: "Client", addr: str) -> "Client":
        c = self.members.get(addr)
        if c is None:
            c = await seed._member(addr)
            self.members[addr] = c
        return c

    async def run(self, seed: "Client", key: str, op: str, params: Any, safe: bool) -> Any:
        slot = slot_of(key)
        addr = self.map.primary_of(slot)
        redirects = 0
        while True:
            try:
                if addr is None:
                    return await seed._direct(op, params, safe=safe)
                member = await self.member(seed, addr)
                return await member._direct(op, params, safe=safe)
            except ServerError as e:
                moved = e.code == "MOVED" and isinstance(e.details.get("addr"), str) and e.details["addr"]
                again = e.code in ("CLUSTERDOWN", "NO_PRIMARY")
                if not (moved or again) or redirects >= MAX_REDIRECTS:
                    raise
                redirects += 1
                if self.refresh_due():
                    await self.reload(seed)
                if moved:
                    self.moved += 1
                    addr = e.details["addr"]
                else:
                    fresh = self.map.primary_of(slot)
                    if fresh is None or fresh == addr:
                        raise
                    addr = fresh

    async def close(self) -> None:
        for c in self.members.values():
            await c.close()
        self.members.clear()
