"""The asyncio client. One ``Client`` is one connection shared by any number of tasks: every
call is pipelined (answers are matched to requests by id), so ``asyncio.gather`` of eight calls
keeps eight requests in flight. A lost connection is replaced on the next call; calls that are
safe to repeat are retried with capped exponential backoff."""

from __future__ import annotations

import asyncio
import ssl as _ssl
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Dict, Iterable, List, Optional, Sequence, Tuple, Union

# The connection (and its limits, still importable from here as before).
from . import _fanout
from ._cluster import Routing, route_key
from ._watch import ClusterWatch
from ._conn import JSON, SUBSCRIPTION_QUEUE_MAX, TIMEOUT_GRAIN, WRITE_HIGH_WATER, _Conn  # noqa: F401
from ._lifecycle import LifecycleCalls, add_reply  # noqa: F401  (add_reply: importable from here)
from .errors import ConnectionLost, ServerError, SmdbError, SubscriptionLagged, may_resend

PROTOCOL_VERSION = 1
__version__ = "0.1.0"


@dataclass
class RetryPolicy:
    """Capped exponential backoff; ``attempts`` counts the first try (1: never retry)."""

    attempts: int = 6
    initial_backoff: float = 0.05
    max_backoff: float = 2.0

    def backoff(self, attempt: int) -> float:
        return min(self.initial_backoff * (2 ** (attempt - 1)), self.max_backoff)

    @classmethod
    def failover(cls) -> "RetryPolicy":
        """Enough tries to ride out an automatic failover (docs/ha.md: a lease of a few
        seconds, then an election): 16 tries, waits of 50 ms doubling up to 1 s, about 11.5 s
        in all. The Rust client's ``RetryPolicy::failover()``."""
        return cls(attempts=16, initial_backoff=0.05, max_backoff=1.0)


def parse_addresses(text: str, default_port: int = 7401) -> List[Tuple[str, int]]:
    """``"a:7401,b:7401"`` (the members of a failover cluster) as ``[(host, port), ...]``; a
    name without a port gets ``default_port``."""
    out: List[Tuple[str, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if sep and port.isdigit():
            out.append((host.strip("[]"), int(port)))
        else:
            out.append((part, default_port))
    return out


@dataclass
class Request:
    """One request for ``Client.pipeline`` or ``Client.batch``: op name, params, and whether
    it is safe to send again."""

    op: str
    params: Optional[JSON] = None
    safe: bool = True


@dataclass
class ConnectOptions:
    """How a client connects (and reconnects)."""

    client_name: str = "smdb-python"
    #: Bearer token: AUTH follows HELLO.
    token: Optional[str] = None
    #: TLS: ``True`` for the system CAs, or an ``ssl.SSLContext`` (mutual TLS: load the client
    #: certificate into it).
    ssl: Union[None, bool, _ssl.SSLContext] = None
    #: Name to verify the server certificate against (default: the host).
    server_hostname: Optional[str] = None
    #: Seconds for connect + TLS handshake, and for each call's answer (``None``: no limit; the
    #: answer timeout is checked per connection and fires up to ``TIMEOUT_GRAIN`` late).
    connect_timeout: Optional[float] = 5.0
    timeout: Optional[float] = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class Client(LifecycleCalls):
    """The asyncio client. Make one with ``await Client.connect(host, port, ...)``, or with
    every member of a failover cluster: ``await Client.connect("a:7401,b:7401,c:7401")``.
    MIGRATE_INSTANCES and DELETE_INSTANCES calls come from ``LifecycleCalls`` (``_lifecycle``)."""

    def __init__(self, host: str, port: int, options: ConnectOptions) -> None:
        #: The addresses this client may use; the one in use is ``(host, port)``. With more
        #: than one, writes follow the primary (``_follow``, docs/ha.md "Clients").
        self.addresses = parse_addresses(host, port) if "," in host else [(host, port)]
        self.host, self.port = self.addresses[0]
        self.options = options
        self._conn: Optional[_Conn] = None
        self._connecting: Optional[asyncio.Lock] = None
        self.hello_result: Optional[JSON] = None
        #: Requests sent again after a retryable failure, and connections opened.
        self.retries = 0
        self.connects = 0
        #: Cluster mode (the seed's HELLO lists ``"cluster"``): the slot map and the group
        #: primaries' clients (``_cluster``); instance ops then route by slot.
        self._cluster: Optional[Routing] = None

    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = 7401,
        *,
        options: Optional[ConnectOptions] = None,
        **kw: Any,
    ) -> "Client":
        """Connects, sends HELLO and (with ``token``) AUTH, retrying while the server is
        unreachable or refuses for a retryable reason. Keyword arguments set
        ``ConnectOptions`` fields. ``host`` may list several ``host:port`` addresses separated
        by commas: each try takes the next, and requests follow the primary."""
        opts = options or ConnectOptions(**kw)
        c = cls(host, port, opts)
        await c._connection()
        if "cluster" in ((c.hello_result or {}).get("features") or []):
            routing = Routing()
            await routing.reload(c)
            c._cluster = routing
        return c

    async def _member(self, addr: str, retry_nothing: bool = False) -> "Client":
        """A client of one group primary, with this client's options and no routing
        (``retry_nothing``: a policy of one try, the routing pacing the retries)."""
        host, port = parse_addresses(addr)[0]
        options = self.options
        if retry_nothing:
            options = replace(options, retry=replace(options.retry, attempts=1))
        c = type(self)(host, port, options)
        await c._connection()
        return c

    @property
    def is_cluster(self) -> bool:
        """Whether the seed runs in cluster mode (instance ops then route by slot)."""
        return self._cluster is not None

    @property
    def cluster_map_epoch(self) -> int:
        """The epoch of the slot map this client routes by (0: none, or not a cluster)."""
        return self._cluster.map.map_epoch if self._cluster is not None else 0

    @property
    def cluster_redirects(self) -> int:
        """``MOVED`` answers this client followed (0 while its map is current)."""
        return self._cluster.moved if self._cluster is not None else 0

    async def refresh_cluster_map(self) -> None:
        """Reads the slot map again from the seed now (cluster clients; no-op otherwise)."""
        if self._cluster is not None:
            await self._cluster.reload(self)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._cluster is not None:
            await self._cluster.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- connection ---------------------------------------------------------------------------

    async def _open(self) -> _Conn:
        o = self.options
        ctx: Optional[_ssl.SSLContext]
        if o.ssl is True:
            ctx = _ssl.create_default_context()
        elif isinstance(o.ssl, _ssl.SSLContext):
            ctx = o.ssl
        else:
            ctx = None
        kw: Dict[str, Any] = {}
        if ctx is not None:
            kw = {"ssl": ctx, "server_hostname": o.server_hostname or self.host}
        loop = asyncio.get_running_loop()
        conn = _Conn(loop, o.timeout)
        opening = loop.create_connection(lambda: conn, self.host, self.port, **kw)
        try:
            await asyncio.wait_for(opening, o.connect_timeout)
        except asyncio.TimeoutError:
            raise ConnectionLost(f"connect to {self.host}:{self.port} timed out") from None
        except (OSError, _ssl.SSLError) as e:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {e}") from None
        try:
            hello = {"protocol_version": PROTOCOL_VERSION, "client_name": o.client_name, "client_version": __version__}
            self.hello_result = await self._wait(conn.send("HELLO", hello), "HELLO")
            if o.token is not None:
                await self._wait(conn.send("AUTH", {"method": "bearer", "token": o.token}), "AUTH")
        except BaseException:
            conn.close()
            raise
        self.connects += 1
        return conn

    async def _connection(self) -> _Conn:
        c = self._conn
        if c is not None and c.alive:
            return c
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            c = self._conn
            if c is not None and c.alive:
                return c
            policy = self.options.retry
            attempt = 1
            while True:
                try:
                    self._conn = await self._open()
                    return self._conn
                except SmdbError as e:
                    if attempt >= policy.attempts or not may_resend(e, True):
                        raise
                    self._next_address()
                    await asyncio.sleep(policy.backoff(attempt))
                    attempt += 1

    def _next_address(self) -> None:
        """The next address in the list (a member that did not answer, or is not primary)."""
        if len(self.addresses) > 1:
            i = self.addresses.index((self.host, self.port)) if (self.host, self.port) in self.addresses else -1
            self.host, self.port = self.addresses[(i + 1) % len(self.addresses)]

    def _follow(self, error: SmdbError) -> bool:
        """After ``error``, whether to go on elsewhere (several addresses only): to the primary
        a follower's ``READ_ONLY_MODE`` names (the request was not executed), or to the next
        member after ``NO_PRIMARY``, ``CLUSTERDOWN``, ``SHUTTING_DOWN`` or a lost connection.
        Closes the connection it leaves."""
        if len(self.addresses) < 2:
            return False
        if isinstance(error, ServerError):
            primary = error.details.get("primary")
            if error.code == "READ_ONLY_MODE" and isinstance(primary, str) and primary:
                host, port = parse_addresses(primary)[0]
                if (host, port) not in self.addresses:
                    self.addresses.append((host, port))
                self.host, self.port = host, port
            elif error.code in ("NO_PRIMARY", "CLUSTERDOWN", "SHUTTING_DOWN"):
                self._next_address()
            else:
                return False
        elif isinstance(error, ConnectionLost):
            self._next_address()
        else:
            return False
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        return True

    async def _wait(self, fut: "asyncio.Future[JSON]", op: str) -> JSON:
        # The answer timeout (``options.timeout``) is the connection's: it fails ``fut`` with
        # ConnectionLost("<op>: no response within <t> s").
        return await fut

    # -- calls --------------------------------------------------------------------------------

    async def call(self, op: str, params: Optional[JSON] = None) -> JSON:
        """One request, raw: returns its ``result`` or raises the server's error. No retry."""
        conn = self._conn
        if conn is None or conn.dead is not None:
            conn = await self._connection()
        fut = conn.send(op, params)
        if conn._paused or conn._out_bytes > WRITE_HIGH_WATER:
            await conn.drain()
        return await fut

    async def request(self, op: str, params: Optional[JSON] = None, *, safe: bool) -> JSON:
        """One request, retried per the policy where that is safe (``safe``: a read,
        PUT_MACHINE, or a write with an idempotency key), on a new connection when the old one
        was lost. In cluster mode an instance op goes to its slot's group primary
        (``_cluster``)."""
        if self._cluster is not None:
            key = route_key(op, params)
            if key is not None:
                return await self._cluster.run(self, key, op, params, safe)
        return await self._direct(op, params, safe=safe)

    async def _direct(self, op: str, params: Optional[JSON] = None, *, safe: bool) -> JSON:
        """``request`` on this client's own connection (the seed's, in cluster mode)."""
        # The first try on a live connection, inlined (every typed op's path; ``apply_event``
        # has its own copy); the retries go on in ``_retry``.
        conn = self._conn
        if conn is not None and conn.dead is None:
            fut = conn.send(op, params)
            try:
                if conn._paused or conn._out_bytes > WRITE_HIGH_WATER:
                    await conn.drain()
                return await fut
            except SmdbError as e:
                return await self._retry(op, params, safe, e)
        return await self._retry(op, params, safe, None)

    async def _retry(self, op: str, params: Optional[JSON], safe: bool, error: Optional[SmdbError]) -> JSON:
        """``request`` after its first try failed with ``error`` (or without a first try, when
        ``error`` is None: no live connection)."""
        attempt = 1
        while True:
            if error is not None:
                policy = self.options.retry
                # A follower's READ_ONLY_MODE was not executed: any request may go on to the
                # primary it names.
                redirect = isinstance(error, ServerError) and error.code == "READ_ONLY_MODE"
                if attempt >= policy.attempts or not (may_resend(error, safe) or redirect):
                    raise error
                if not self._follow(error):
                    if redirect:
                        raise error
                    if isinstance(error, ServerError) and error.code == "SHUTTING_DOWN" and self._conn:
                        self._conn.close()
                # Backoff even on a redirect: during an election a follower may still name a
                # primary that is gone.
                await asyncio.sleep(policy.backoff(attempt))
                attempt += 1
                self.retries += 1
            try:
                conn = self._conn
                if conn is None or conn.dead is not None:
                    conn = await self._connection()
                fut = conn.send(op, params)
                if conn._paused or conn._out_bytes > WRITE_HIGH_WATER:
                    await conn.drain()
                return await fut
            except SmdbError as e:
                error = e

    async def pipeline(self, requests: Sequence[Request]) -> List[Union[JSON, ServerError]]:
        """Sends every request at once on this connection and returns the results in request
        order; a server error takes its request's place (a lost connection raises)."""
        conn = await self._connection()
        futs = [conn.send(r.op, r.params) for r in requests]
        await conn.drain()
        out: List[Union[JSON, ServerError]] = []
        for f in futs:
            try:
                out.append(await f)
            except ServerError as e:
                out.append(e)
        return out

    # -- typed ops ------------------------------------------------------------------------------

    async def ping(self) -> JSON:
        return await self.request("PING", None, safe=True)

    async def info(self) -> JSON:
        return await self.request("INFO", None, safe=True)

    async def auth(self, token: str) -> JSON:
        return await self.request("AUTH", {"method": "bearer", "token": token}, safe=True)

    async def bye(self) -> JSON:
        r = await self.call("BYE")
        await self.close()
        return r

    async def put_machine(self, machine: str, version: int, definition: JSON) -> JSON:
        p = {"machine": machine, "version": version, "definition": definition}
        return await self.request("PUT_MACHINE", p, safe=True)

    async def get_machine(self, machine: str, version: Optional[int] = None) -> JSON:
        return await self.request("GET_MACHINE", _params(machine=machine, version=version), safe=True)

    async def list_machines(self) -> JSON:
        return await self.request("LIST_MACHINES", {}, safe=True)

    async def create_instance(
        self,
        machine: str,
        version: int,
        id: str,
        context: Optional[JSON] = None,
        *,
        idempotency_key: Optional[str] = None,
    ) -> JSON:
        r = create_instance(machine, version, id, context, idempotency_key=idempotency_key)
        return await self.request(r.op, r.params, safe=r.safe)

    async def get_instance(self, id: str) -> JSON:
        return await self.request("GET_INSTANCE", {"id": id}, safe=True)

    async def list_instances(
        self,
        *,
        machine: Optional[str] = None,
        state: Optional[str] = None,
        has_timer: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> JSON:
        p = _params(machine=machine, state=state, has_timer=has_timer, limit=limit, cursor=cursor)
        if self._cluster is not None:
            # Every group's page, merged by id, with one combined cursor (``_fanout``).
            return await _fanout.list_instances(self, p)
        return await self.request("LIST_INSTANCES", p, safe=True)

    async def find_instances(
        self,
        machine: str,
        where: JSON,
        *,
        state: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        include_context: Optional[bool] = None,
    ) -> JSON:
        """One page of FIND_INSTANCES: ``where`` maps declared index paths (``"ctx.customer"``)
        to a value, ``{"in": [..]}`` or ``{"gte": x, "lt": y}``."""
        p = _params(machine=machine, where=where, state=state, limit=limit, cursor=cursor,
                    include_context=include_context)
        if self._cluster is not None:
            # Every group's page, merged by id (up to ``limit`` per group; ``versions`` of
            # every group), with one combined cursor (``_fanout``).
            return await _fanout.fan_out(self, "FIND_INSTANCES", p)
        return await self.request("FIND_INSTANCES", p, safe=True)

    async def find_pages(self, machine: str, where: JSON, **kw: Any) -> AsyncIterator[JSON]:
        """Every page of FIND_INSTANCES from ``cursor`` (or the start) to the last."""
        while True:
            page = await self.find_instances(machine, where, **kw)
            yield page
            if page.get("next_cursor") is None:
                return
            kw["cursor"] = page["next_cursor"]

    async def scan_instances(
        self,
        machine: str,
        where: Optional[JSON] = None,
        *,
        state: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        include_context: Optional[bool] = None,
    ) -> JSON:
        """One page of SCAN_INSTANCES: any context path; a page may be short and go on."""
        p = _params(machine=machine, where=where or {}, state=state, limit=limit, cursor=cursor,
                    include_context=include_context)
        if self._cluster is not None:
            # As FIND's, ``examined`` summed.
            return await _fanout.fan_out(self, "SCAN_INSTANCES", p)
        return await self.request("SCAN_INSTANCES", p, safe=True)

    async def delete_instance(self, id: str) -> JSON:
        return await self.request("DELETE_INSTANCE", {"id": id}, safe=False)

    async def apply_event(
        self,
        instance_id: str,
        event: str,
        payload: Optional[JSON] = None,
        *,
        expected_state: Optional[str] = None,
        expected_wal_offset: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> JSON:
        p: JSON = {"instance_id": instance_id, "event": event}
        if payload is not None:
            p["payload"] = payload
        if expected_state is not None:
            p["expected_state"] = expected_state
        if expected_wal_offset is not None:
            p["expected_wal_offset"] = expected_wal_offset
        if idempotency_key is not None:
            p["idempotency_key"] = idempotency_key
        if self._cluster is not None:
            return await self.request("APPLY_EVENT", p, safe=idempotency_key is not None)
        # ``request``, inlined: one coroutine less on the hottest path.
        conn = self._conn
        if conn is not None and conn.dead is None:
            fut = conn.send("APPLY_EVENT", p)
            try:
                if conn._paused or conn._out_bytes > WRITE_HIGH_WATER:
                    await conn.drain()
                return await fut
            except SmdbError as e:
                return await self._retry("APPLY_EVENT", p, idempotency_key is not None, e)
        return await self._retry("APPLY_EVENT", p, idempotency_key is not None, None)

    async def get_history(self, id: str, *, from_: Optional[int] = None, limit: Optional[int] = None) -> JSON:
        p = _params(id=id, limit=limit)
        if from_ is not None:
            p["from"] = from_
        return await self.request("GET_HISTORY", p, safe=True)

    async def batch(self, ops: Iterable[Request], *, atomic: bool = False) -> JSON:
        """BATCH of single-op requests (``smdb.create_instance(...)``, ``smdb.apply_event(...)``,
        ``Request("GET_INSTANCE", {...})``, ``Request("DELETE_INSTANCE", {...}, safe=False)``)."""
        ops = list(ops)
        p = {"mode": "atomic" if atomic else "best_effort", "ops": [{"op": o.op, "params": o.params or {}} for o in ops]}
        if self._cluster is not None and not atomic:
            # Split by group primary, the results in the ops' order (``_fanout``).
            return await _fanout.batch(self, p["ops"], all(o.safe for o in ops))
        key = next((k for k in (route_key(o.op, o.params) for o in ops) if k is not None), None)
        if self._cluster is not None and key is not None:
            # An atomic batch keeps to one slot: to its group primary (else CROSS_SLOT).
            return await self._cluster.run(self, key, "BATCH", p, all(o.safe for o in ops))
        return await self.request("BATCH", p, safe=all(o.safe for o in ops))

    async def replication_status(self) -> JSON:
        return await self.request("REPLICATION_STATUS", {}, safe=True)

    async def promote(self) -> JSON:
        return await self.request("PROMOTE", {}, safe=False)

    async def timers_resume(self) -> JSON:
        """TIMERS_RESUME: {"resumed": true, "was_paused": bool}."""
        return await self.request("TIMERS_RESUME", {}, safe=False)

    async def unwatch(self, subscription_id: Any) -> JSON:
        return await self.call("UNWATCH", {"subscription_id": subscription_id})

    async def watch_all(
        self,
        *,
        machines: Optional[List[str]] = None,
        from_states: Optional[List[str]] = None,
        to_states: Optional[List[str]] = None,
        events: Optional[List[str]] = None,
        include_context: bool = False,
        from_cursor: Optional[str] = None,
    ) -> "Subscription":
        """WATCH_ALL as an async iterator of events that resumes from its cursor after a
        reconnect (no gap, no duplicate); a ``subscription_lagged`` raises
        ``SubscriptionLagged`` and iterating on resumes from its cursor."""
        p = _params(
            machines=machines,
            from_states=from_states,
            to_states=to_states,
            events=events,
            include_context=include_context or None,
            from_cursor=from_cursor,
        )
        if self._cluster is not None:
            # One subscription per group, merged, each instance's events in order (``_watch``).
            return await ClusterWatch.open(self, p)  # type: ignore[return-value]
        s = Subscription(self, "WATCH_ALL", p)
        await s._open()
        return s

    async def watch_instance(
        self, instance_id: str, *, include_context: bool = False, from_offset: Optional[int] = None
    ) -> "Subscription":
        """WATCH_INSTANCE as an async iterator (see ``watch_all``)."""
        p = _params(instance_id=instance_id, include_context=include_context or None, from_offset=from_offset)
        s = Subscription(self, "WATCH_INSTANCE", p)
        await s._open()
        return s

    async def _watch(self, op: str, params: JSON, queue: Any) -> Tuple[_Conn, JSON]:
        conn = await self._connection()
        fut = conn.send(op, params, queue)
        return conn, await self._wait(fut, op)


def _params(**kw: Any) -> JSON:
    return {k: v for k, v in kw.items() if v is not None}


def create_instance(
    machine: str, version: int, id: str, context: Optional[JSON] = None, *, idempotency_key: Optional[str] = None
) -> Request:
    """A CREATE_INSTANCE request (for ``pipeline`` and ``batch``)."""
    p = _params(machine=machine, version=version, id=id, context=context or {}, idempotency_key=idempotency_key)
    return Request("CREATE_INSTANCE", p, safe=idempotency_key is not None)


def apply_event(
    instance_id: str,
    event: str,
    payload: Optional[JSON] = None,
    *,
    expected_state: Optional[str] = None,
    expected_wal_offset: Optional[int] = None,
    idempotency_key: Optional[str] = None,
) -> Request:
    """An APPLY_EVENT request (for ``pipeline`` and ``batch``)."""
    p = _params(
        instance_id=instance_id,
        event=event,
        payload=payload,
        expected_state=expected_state,
        expected_wal_offset=expected_wal_offset,
        idempotency_key=idempotency_key,
    )
    return Request("APPLY_EVENT", p, safe=idempotency_key is not None)


def _cursor_max(cursor: str) -> Optional[int]:
    # `c1-<o0>-<o1>-...`, or `c2-<e0>.<o0>-...` (each offset with its epoch); in cluster mode
    # followed by `@<group>`.
    cursor = cursor.partition("@")[0]
    if cursor.startswith("c1-"):
        parts = cursor[3:].split("-")
    elif cursor.startswith("c2-"):
        parts = [p.partition(".")[2] for p in cursor[3:].split("-")]
    else:
        return None
    try:
        return max(int(p) for p in parts)
    except ValueError:
        return None


#: How long a subscription keeps trying to open itself again.
RESUBSCRIBE_FOR = 30.0


class Subscription:
    """An async iterator of event pushes (dicts). Keeps its position: after a lost connection
    it opens itself again from the last delivered event on a new connection."""

    def __init__(self, client: Client, op: str, params: JSON) -> None:
        self.client = client
        self.op = op
        self.params = params
        self.cursor: Optional[str] = None
        self.last_offset: Optional[int] = None
        self.id: Any = None
        self.reconnects = 0
        self._conn: Optional[_Conn] = None
        self._queue: "asyncio.Queue[Optional[JSON]]" = asyncio.Queue(SUBSCRIPTION_QUEUE_MAX)
        self._reopen = False

    def _request(self) -> JSON:
        p = dict(self.params)
        if self.op == "WATCH_ALL":
            if self.cursor is not None:
                p["from_cursor"] = self.cursor
        else:
            if self.last_offset is not None:
                p["from_offset"] = self.last_offset + 1
            elif self.cursor is not None and _cursor_max(self.cursor) is not None:
                p["from_offset"] = (_cursor_max(self.cursor) or 0) + 1
        return p

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESUBSCRIBE_FOR
        policy = self.client.options.retry
        attempt = 1
        while True:
            queue: "asyncio.Queue[Optional[JSON]]" = asyncio.Queue(SUBSCRIPTION_QUEUE_MAX)
            try:
                conn, r = await self.client._watch(self.op, self._request(), queue)
            except ConnectionLost:
                if loop.time() > deadline or policy.attempts <= 1:
                    raise
                await asyncio.sleep(policy.backoff(attempt))
                attempt += 1
                continue
            if self._conn is not None and conn is not self._conn:
                self.reconnects += 1
            self._conn, self._queue, self.id = conn, queue, r.get("subscription_id")
            if self.cursor is None:
                self.cursor = r.get("cursor")
            self._reopen = False
            return

    def __aiter__(self) -> AsyncIterator[JSON]:
        return self

    async def __anext__(self) -> JSON:
        while True:
            if self._reopen:
                await self._open()
            msg = await self._queue.get()
            if msg is None:
                # The connection ended (or this queue overflowed): resume where we stand.
                if self._conn is not None and self._conn.alive:
                    self._conn.forget(self.id)
                    try:
                        await self.client.unwatch(self.id)
                    except SmdbError:
                        pass
                self._reopen = True
                continue
            if msg.get("subscription_id") != self.id:
                continue
            if msg.get("type") == "subscription_lagged":
                cursor = str(msg.get("resume_cursor", "0"))
                self.cursor = cursor
                m = _cursor_max(cursor)
                if m is not None:
                    self.last_offset = m
                self._reopen = True
                raise SubscriptionLagged(self.id, cursor)
            self.cursor = msg.get("cursor", self.cursor)
            self.last_offset = msg.get("wal_offset", self.last_offset)
            return msg

    async def next(self, timeout: Optional[float] = None) -> Optional[JSON]:
        """The next event, or ``None`` when none came within ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(self.__anext__(), timeout)
        except asyncio.TimeoutError:
            return None

    async def close(self) -> None:
        """Ends the subscription (UNWATCH) on its connection."""
        if self._conn is not None and self._conn.alive and not self._reopen:
            self._conn.forget(self.id)
            try:
                await self.client.unwatch(self.id)
            except SmdbError:
                pass
