"""``watch_all`` of a cluster client (docs/cluster.md, "Clients"), as the Rust client's
``watch_fanout``: one WATCH_ALL per group, to each group's primary by the map, on a connection
of its own, the pushes merged into one async iterator. Each group's subscription resumes from
its own cursor after a lost connection (the ``Subscription`` class does that).

A member pushes the events of the slots its group owns. When slots move, the moved instances'
events before the switch come from the source group's subscription and those after it from
the target's; the source sends ``slots_moved`` after its last event of them (one per shard of
the source, each after that shard's last event). So an event of a slot this side still holds
as another watched group's is held until that group's ``slots_moved`` hands the slot over, and
each instance's events stay in order. A group the map gains, or that a ``slots_moved`` names,
is watched from ``from_cursor: "0"`` (all it retains: nothing from before this began). The
one entry point is ``ClusterWatch.open``."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

from . import _fanout
from ._cluster import SLOT_COUNT, slot_of
from .errors import ConnectionLost, ServerError, SmdbError, SubscriptionLagged

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client, Subscription

JSON = Any
#: How often the map is read again to find groups it gained.
MAP_EVERY = 1.0
#: How long a reopened group's hand-over of moved slots waits for a live push of their shard
#: (its replay over) before it goes ahead.
HANDOVER_WAIT = 2.0
#: Tries to open every group's subscription under one map epoch.
OPEN_TRIES = 5


def groups(shards: JSON) -> Tuple[int, List[Tuple[str, Optional[str], List[Tuple[int, int]]]]]:
    """The map epoch and the ``(name, primary address, slot ranges)`` of each group."""
    out = []
    for g in shards.get("shards") or []:
        primary = g.get("primary")
        addr = next((n.get("addr") for n in g.get("nodes") or [] if n.get("node_id") == primary), None)
        out.append((g["group"], addr, [(int(r[0]), int(r[1])) for r in g.get("slots") or []]))
    return int(shards.get("map_epoch") or 0), out


def cursor_shards(cursor: Optional[str]) -> Optional[int]:
    """The shard positions in a cursor (``c1-<o0>-..``, ``c2-<e0>.<o0>-..``, in cluster mode
    followed by ``@<group>``): the group's shard count."""
    if not cursor or not (cursor.startswith("c1-") or cursor.startswith("c2-")):
        return None
    return len(cursor.partition("@")[0][3:].split("-"))


class Order:
    """Who owns each slot as the streams have told it so far, and the events held until a
    source's ``slots_moved`` (the Rust client's ``watch_fanout::Order``)."""

    def __init__(self, gs: List[Tuple[str, Optional[str], List[Tuple[int, int]]]]) -> None:
        self.owner: List[Optional[str]] = [None] * SLOT_COUNT
        #: The groups watched, with their shard count (0: not known yet).
        self.shards: Dict[str, int] = {}
        self.held: Dict[str, Deque[JSON]] = {}
        #: By group reopened: slots to hand over to another group once its replay is over.
        self.pending: Dict[str, List[Tuple[int, str]]] = {}
        for name, _, ranges in gs:
            for lo, hi in ranges:
                for s in range(lo, min(hi, SLOT_COUNT - 1) + 1):
                    self.owner[s] = name

    def saw(self, group: str, cursor: Optional[str]) -> None:
        """``group`` is watched; ``cursor`` (of its pushes) tells its shard count."""
        n = cursor_shards(cursor)
        if n is not None or group not in self.shards:
            self.shards[group] = n or 0

    def event(self, group: str, e: JSON) -> Optional[JSON]:
        """The event to deliver now, or ``None`` when held."""
        o = self.owner[slot_of(e["instance_id"])]
        if o is not None and o != group and o in self.shards:
            self.held.setdefault(group, deque()).append(e)
            return None
        return e

    def moved(self, group: str, push: JSON) -> List[JSON]:
        """``slots_moved`` from ``group``: its slots (of its shard) pass to the target; the
        events that releases, in order."""
        lo, hi = int(push["slots"][0]), int(push["slots"][1])
        to, shard, n = push["to"], push.get("shard"), self.shards.get(group) or 0
        for s in range(lo, min(hi, SLOT_COUNT - 1) + 1):
            if (shard is None or n == 0 or s % n == shard) and self.owner[s] == group:
                self.owner[s] = to
        return self._release()

    def reopened(self, group: str, gs: List[Tuple[str, Optional[str], List[Tuple[int, int]]]]) -> None:
        """After ``group``'s subscription was opened again (a ``slots_moved`` may have gone with
        its connection): the slots the streams give it but the fresh map gives another are to
        pass to that one once the reopened replay is over, shard by shard (``live``), or when
        the wait for that ends (``expire``). A replay carries no ``slots_moved``, and it may
        still bring older events of those slots."""
        moves = []
        for name, _, ranges in gs:
            for lo, hi in ranges:
                for s in range(lo, min(hi, SLOT_COUNT - 1) + 1):
                    if self.owner[s] == group and name != group:
                        moves.append((s, name))
        self.pending[group] = moves

    def live(self, group: str, shard: int) -> List[JSON]:
        """A live push (not replayed) of ``group``'s shard ``shard``: its slots pending a
        hand-over pass; the events that releases."""
        n = self.shards.get(group) or 0
        moves = self.pending.get(group) or []
        now = [m for m in moves if n == 0 or m[0] % n == shard]
        self.pending[group] = [m for m in moves if not (n == 0 or m[0] % n == shard)]
        return self._hand_over(group, now)

    def expire(self, group: str) -> List[JSON]:
        """The wait for ``group``'s replay is over: every slot pending a hand-over passes."""
        return self._hand_over(group, self.pending.pop(group, []))

    def _hand_over(self, group: str, moves: List[Tuple[int, str]]) -> List[JSON]:
        if not moves:
            return []
        for s, to in moves:
            if self.owner[s] == group:
                self.owner[s] = to
        return self._release()

    def _release(self) -> List[JSON]:
        out: List[JSON] = []
        for g, q in self.held.items():
            keep: Deque[JSON] = deque()
            for e in q:
                (out if self.owner[slot_of(e["instance_id"])] == g else keep).append(e)
            self.held[g] = keep
        return out

    def holds(self, group: str) -> bool:
        return bool(self.held.get(group))


class ClusterWatch:
    """An async iterator of the events of every group (dicts, as ``Subscription``'s, with
    ``group`` and ``slot``). ``cursor`` is one combined cursor (``cluster:`` then hex of
    ``{group: cursor}``) that ``watch_all(from_cursor=...)`` takes back; a group with events
    held keeps the cursor from before the first of them, so resuming from it may repeat some
    events but loses none. A group's ``subscription_lagged`` raises ``SubscriptionLagged``
    (its ``subscription_id`` is the group) and iterating on resumes it."""

    def __init__(self, seed: "Client", params: JSON) -> None:
        self.seed = seed
        self.params = {k: v for k, v in params.items() if k != "from_cursor"}
        self.subs: Dict[str, "Subscription"] = {}
        self.order = Order([])
        self.cursor: Optional[str] = None
        self._received: Dict[str, str] = {}
        self._cursors: Dict[str, str] = {}
        self._reconnects: Dict[str, int] = {}
        #: Groups opened again, since when (their hand-over waits at most HANDOVER_WAIT).
        self._reopened: Dict[str, float] = {}
        self._in: "asyncio.Queue[Tuple[str, Any]]" = asyncio.Queue()
        self._ready: Deque[Any] = deque()
        self._out: "asyncio.Queue[Any]" = asyncio.Queue(256)
        self._tasks: List["asyncio.Task[None]"] = []
        self._pumping: Optional["asyncio.Task[None]"] = None
        self._next_map = 0.0

    @classmethod
    async def open(cls, seed: "Client", params: JSON) -> "ClusterWatch":
        """WATCH_ALL over every group of ``seed``'s cluster. ``from_cursor`` may be a combined
        cursor (each group from its own) or one cursor for every group (``"0"``)."""
        w = cls(seed, params)
        start = params.get("from_cursor")
        named = _fanout.decode_cursor(start) if start and start.startswith(_fanout.CURSOR_PREFIX) else {}
        for _ in range(OPEN_TRIES):
            epoch, gs = groups(await seed._direct("CLUSTER_SHARDS", {}, safe=True))
            try:
                for name, addr, _ in gs:
                    await w._watch(name, addr, named.get(name, start))
            except BaseException:
                await w._close_subs()
                raise
            # A move that switched while they opened gave no slots_moved to a subscription
            # opened after it: open them all again under one epoch.
            again, _ = groups(await seed._direct("CLUSTER_SHARDS", {}, safe=True))
            if again == epoch:
                break
            await w._close_subs()
        w.order = Order(gs)
        for name, sub in w.subs.items():
            w.order.saw(name, sub.cursor)
            w._received[name] = sub.cursor or "0"
        w._publish()
        w._next_map = time.monotonic() + MAP_EVERY
        w._pumping = asyncio.ensure_future(w._pump())
        return w

    async def _watch(self, group: str, addr: Optional[str], from_cursor: Optional[str]) -> None:
        from .client import Subscription

        if addr is None:
            raise SmdbError(f"group {group} has no primary")
        member = await self.seed._member(addr)
        p = dict(self.params)
        if from_cursor is not None:
            p["from_cursor"] = from_cursor
        sub = Subscription(member, "WATCH_ALL", p)
        await sub._open()
        self.subs[group] = sub
        self._reconnects[group] = 0
        self.order.saw(group, sub.cursor)
        self._tasks.append(asyncio.ensure_future(self._read(group, sub)))

    async def _read(self, group: str, sub: "Subscription") -> None:
        while True:
            try:
                msg: Any = await sub.__anext__()
            except SubscriptionLagged as e:
                msg = SubscriptionLagged(group, e.resume_cursor)
            except ConnectionLost:
                # Its member stayed unreachable: the group's primary by a fresh map, from the
                # subscription's cursor.
                try:
                    sub = await self._resubscribe(group, sub)
                except Exception as e:  # noqa: BLE001 - handed to the consumer, which ends
                    await self._in.put((group, e))
                    return
                continue
            except Exception as e:  # noqa: BLE001 - handed to the consumer, which ends
                await self._in.put((group, e))
                return
            await self._in.put((group, msg))

    async def _resubscribe(self, group: str, old: "Subscription") -> "Subscription":
        from .client import RESUBSCRIBE_FOR, Subscription

        await old.client.close()
        deadline = time.monotonic() + RESUBSCRIBE_FOR
        attempt = 1
        while True:
            try:
                _, gs = groups(await self.seed._direct("CLUSTER_SHARDS", {}, safe=True))
                addr = next((a for name, a, _ in gs if name == group), None)
                if addr is None:
                    raise ConnectionLost(f"group {group} has no primary")
                p = dict(self.params)
                if old.cursor is not None:
                    p["from_cursor"] = old.cursor
                sub = Subscription(await self.seed._member(addr), "WATCH_ALL", p)
                await sub._open()
            except (ConnectionLost, ServerError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(self.seed.options.retry.backoff(attempt))
                attempt += 1
                continue
            self.subs[group] = sub
            self._reconnects[group] = -1  # its next push first reads the map (``_handle``)
            return sub

    async def _close_subs(self) -> None:
        for t in self._tasks:
            t.cancel()
        for sub in self.subs.values():
            await sub.close()
            await sub.client.close()
        self._tasks, self.subs = [], {}

    def __aiter__(self) -> "ClusterWatch":
        return self

    async def __anext__(self) -> JSON:
        item = await self._out.get()
        if isinstance(item, BaseException):
            self._out.put_nowait(item)  # it ended: every later call raises it too
            raise item
        return item

    async def _pump(self) -> None:
        """The readers' pushes in, events out in order (a task of its own, so a consumer's
        timeout never drops a push half handled)."""
        try:
            while True:
                try:
                    group, msg = await asyncio.wait_for(self._in.get(), MAP_EVERY)
                except asyncio.TimeoutError:
                    group, msg = "", None
                if time.monotonic() >= self._next_map:
                    await self._watch_new_groups()
                self._expire()
                if msg is not None:
                    await self._handle(group, msg)
                self._publish()
                while self._ready:
                    item = self._ready.popleft()
                    await self._out.put(item)
                    if isinstance(item, BaseException) and not isinstance(item, SubscriptionLagged):
                        return
        except Exception as e:  # noqa: BLE001 - handed to the consumer, which ends
            await self._out.put(e)

    def _expire(self) -> None:
        """Hand-overs of groups reopened ``HANDOVER_WAIT`` ago that still wait go ahead."""
        now = time.monotonic()
        for g in [g for g, at in self._reopened.items() if now - at >= HANDOVER_WAIT]:
            del self._reopened[g]
            self._ready.extend(self.order.expire(g))

    async def _handle(self, group: str, msg: Any) -> None:
        if isinstance(msg, SubscriptionLagged):
            self._received[group] = msg.resume_cursor
            self._ready.append(msg)
            return
        if isinstance(msg, BaseException):
            self._ready.append(msg)
            return
        sub = self.subs.get(group)
        if sub is not None and sub.reconnects != self._reconnects.get(group):
            # Opened again: a slots_moved may have gone with the connection; the fresh map
            # says who owns what once the replay is over (``Order.reopened``).
            self._reconnects[group] = sub.reconnects
            _, gs = groups(await self.seed._direct("CLUSTER_SHARDS", {}, safe=True))
            self.order.reopened(group, gs)
            self._reopened[group] = time.monotonic()
        if isinstance(msg.get("shard"), int) and not msg.get("replayed"):
            self._ready.extend(self.order.live(group, msg["shard"]))
        cursor = msg.get("cursor")
        if isinstance(cursor, str):
            self._received[group] = cursor
            self.order.saw(group, cursor)
        if msg.get("type") == "slots_moved":
            if msg.get("to") not in self.subs:
                await self._watch_new_groups()
            self._ready.extend(self.order.moved(group, msg))
        elif msg.get("type") == "event":
            # The contract's ``group`` and ``slot``, when the member left them out.
            msg.setdefault("group", group)
            msg.setdefault("slot", slot_of(msg["instance_id"]))
            e = self.order.event(group, msg)
            if e is not None:
                self._ready.append(e)

    async def _watch_new_groups(self) -> None:
        """Watches, from all they retain, the groups of a fresh map not watched yet."""
        self._next_map = time.monotonic() + MAP_EVERY
        try:
            _, gs = groups(await self.seed._direct("CLUSTER_SHARDS", {}, safe=True))
        except SmdbError:
            return
        for name, addr, _ in gs:
            if name not in self.subs and addr is not None:
                await self._watch(name, addr, "0")

    def _publish(self) -> None:
        for g, c in self._received.items():
            if not self.order.holds(g):
                self._cursors[g] = c
        self.cursor = _fanout.encode_cursor(self._cursors)

    async def next(self, timeout: Optional[float] = None) -> Optional[JSON]:
        """The next event, or ``None`` when none came within ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(self.__anext__(), timeout)
        except asyncio.TimeoutError:
            return None

    async def close(self) -> None:
        """Ends every group's subscription and closes their connections."""
        if self._pumping is not None:
            self._pumping.cancel()
        await self._close_subs()
