"""Cluster mode on the client side (docs/cluster.md, "Clients"), as the Rust client's
``cluster`` module: the slot of an id (CRC16/XMODEM with the hash-tag rule), the slot map read
from ``CLUSTER_SHARDS``, and the routing of instance ops to their slot's group primary.

A client whose seed's HELLO lists the ``"cluster"`` feature reads the map and sends each
instance op to its slot's group primary, over one client per primary opened on first use.
Those clients retry nothing themselves; the routing paces every retry under the seed's policy,
as the Rust client's ``cluster::Route`` does: ``MOVED`` at once to ``details.addr`` (the map
read again at most once per 100 ms; at most ``MAX_REDIRECTS``; never to an older copy's owner
than one already heard from in the request), ``TRYAGAIN`` after a backoff (10 ms doubling up
to the policy's ``max_backoff``), and a group whose primary is gone (``CLUSTERDOWN``,
``NO_PRIMARY``, a refused connection, or a lost one for a request safe to resend) after a
backoff and a new read of the map (from the seed, else any member the map named), resent to
the primary it names."""

from __future__ import annotations

import asyncio
import bisect
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .errors import ConnectionLost, ServerError, SmdbError, may_resend

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

SLOT_COUNT = 16384
MAX_REDIRECTS = 5
REFRESH_EVERY = 0.1
#: The first wait of a routed request that backs off; it doubles up to ``max_backoff``.
FIRST_BACKOFF = 0.01

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
        #: Every member's address: where the map is read when the seed is gone.
        self.nodes: List[str] = []
        #: Each group: its name, its primary's address, its members' addresses.
        self.groups: List[Tuple[str, Optional[str], List[str]]] = []
        for g in shards.get("shards") or []:
            members = [n["addr"] for n in g.get("nodes") or [] if isinstance(n.get("addr"), str)]
            self.nodes += members
            primary = g.get("primary")
            addr = next((n.get("addr") for n in g.get("nodes") or [] if n.get("node_id") == primary), None)
            self.groups.append((str(g.get("group") or ""), addr if isinstance(addr, str) else None, members))
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

    def group_addrs(self) -> List[str]:
        """One address per group, for a call to every group, each once, in order: its
        primary's, or (no primary now) a member's, so the call waits for the group's next
        primary instead of leaving the group out."""
        return sorted({p or m[0] for _, p, m in self.groups if p or m})

    def group_of(self, addr: str) -> Optional[str]:
        """The group ``addr`` is a member of (its primary or another member)."""
        return next((g for g, p, m in self.groups if p == addr or addr in m), None)

    def primary_of_group(self, group: str) -> Optional[str]:
        return next((p for g, p, _ in self.groups if g == group), None)


class Routing:
    """What a cluster client keeps beside its seed connection."""

    def __init__(self) -> None:
        self.map = SlotMap()
        self.members: Dict[str, "Client"] = {}
        self.moved = 0
        self._last_refresh = 0.0

    async def reload(self, seed: "Client") -> None:
        """Reads the map from the seed, else from the first member of the last map that
        answers (kept as is when none does: the next requests' errors say why)."""
        for addr in [None] + list(self.map.nodes):
            try:
                if addr is None:
                    shards = await seed._direct("CLUSTER_SHARDS", {}, safe=True)
                else:
                    c = await seed._member(addr, retry_nothing=True)
                    try:
                        shards = await c._direct("CLUSTER_SHARDS", {}, safe=True)
                    finally:
                        await c.close()
            except (SmdbError, OSError, TimeoutError):
                continue
            self.map = SlotMap(shards)
            return

    def refresh_due(self) -> bool:
        now = time.monotonic()
        if now - self._last_refresh < REFRESH_EVERY:
            return False
        self._last_refresh = now
        return True

    async def member(self, seed: "Client", addr: str) -> "Client":
        c = self.members.get(addr)
        if c is None:
            c = await seed._member(addr, retry_nothing=True)
            self.members[addr] = c
        return c

    async def forget(self, addr: Optional[str]) -> None:
        """Closes the client of ``addr`` (the next use reconnects)."""
        c = self.members.pop(addr, None) if addr is not None else None
        if c is not None:
            await c.close()

    async def run(self, seed: "Client", key: str, op: str, params: Any, safe: bool) -> Any:
        slot = slot_of(key)
        return (await self._run(seed, lambda: self.map.primary_of(slot), op, params, safe, None))[1]

    async def run_group(self, seed: "Client", addr: str, op: str, params: Any, safe: bool) -> Tuple[str, Any]:
        """``op`` to the primary of the group ``addr`` is a member of (by the map now; ``addr``
        itself when the map names no such member), with the retries and redirects of ``run``:
        a primary gone sends it, after a backoff and a new read of the map, to the group's next
        primary. The answer, with the address that gave it."""
        group = self.map.group_of(addr)

        def primary() -> Optional[str]:
            return addr if group is None else self.map.primary_of_group(group)

        return await self._run(seed, primary, op, params, safe, f"the group of {addr} has no primary")

    async def _run(self, seed: "Client", primary: Callable[[], Optional[str]], op: str, params: Any,
                   safe: bool, no_primary: Optional[str]) -> Tuple[str, Any]:
        """``op`` to ``primary()``, retried under the policy; with no primary known once the
        tries are spent, to the seed (``no_primary`` None: it says why) or failed with
        ``no_primary``."""
        route = Route(seed.options.retry)
        addr = primary()
        while True:
            sent = False
            try:
                if addr is None:
                    if not route.may_wait():
                        if no_primary is not None:
                            raise SmdbError(no_primary)
                        return "", await seed._direct(op, params, safe=safe)
                    raise ConnectionLost("no primary known")
                member = await self.member(seed, addr)
                sent = True
                return addr, await member._direct(op, params, safe=safe)
            except (SmdbError, OSError, TimeoutError) as e:
                action, to, wait = route.after(e, safe, sent)
                if action == "fail":
                    raise
                if action == "moved":
                    self.moved += 1
                    if self.refresh_due():
                        await self.reload(seed)
                    addr = to
                elif action == "follow":
                    addr = to
                elif action == "wait":
                    await asyncio.sleep(wait)
                    addr = to or addr
                else:  # refresh
                    await asyncio.sleep(wait)
                    await self.forget(addr)
                    if self.refresh_due():
                        await self.reload(seed)
                    addr = primary()

    async def close(self) -> None:
        for c in self.members.values():
            await c.close()
        self.members.clear()


class Route:
    """One routed request's retries and redirects under the client's policy (the Rust client's
    ``cluster::Route``): ``after`` says what follows an error, as ``(action, address, wait)``
    with action ``fail``, ``moved``, ``follow``, ``wait`` or ``refresh``."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.attempt = 1
        self.redirects = 0
        #: The newest ``MOVED`` heard: its copy's ``map_epoch`` and the owner it named.
        self.newest: Optional[Tuple[int, str]] = None

    def may_wait(self) -> bool:
        return self.attempt < self.policy.attempts

    def _backoff(self) -> Optional[float]:
        if not self.may_wait():
            return None
        wait = min(FIRST_BACKOFF * (2 ** (self.attempt - 1)), self.policy.max_backoff)
        self.attempt += 1
        return wait

    def after(self, e: BaseException, safe: bool, sent: bool) -> Tuple[str, Optional[str], float]:
        if isinstance(e, ServerError):
            to = e.details.get("addr") if e.code == "MOVED" else e.details.get("primary")
            if e.code in ("MOVED", "READ_ONLY_MODE") and isinstance(to, str) and to:
                epoch = int(e.details.get("map_epoch") or 0)
                if e.code == "MOVED" and self.newest and epoch < self.newest[0] and to != self.newest[1]:
                    wait = self._backoff()
                    return ("fail", None, 0.0) if wait is None else ("wait", self.newest[1], wait)
                if self.redirects >= MAX_REDIRECTS:
                    return ("fail", None, 0.0)
                self.redirects += 1
                if e.code == "MOVED":
                    self.newest = (epoch, to)
                    return ("moved", to, 0.0)
                return ("follow", to, 0.0)
            if not may_resend(e, safe):
                return ("fail", None, 0.0)
            elsewhere = e.code in ("CLUSTERDOWN", "NO_PRIMARY", "SHUTTING_DOWN")
        elif isinstance(e, (ConnectionLost, OSError, TimeoutError)):
            if sent and not safe:
                return ("fail", None, 0.0)
            elsewhere = True
        else:
            return ("fail", None, 0.0)
        wait = self._backoff()
        if wait is None:
            return ("fail", None, 0.0)
        return ("refresh" if elsewhere else "wait", None, wait)
