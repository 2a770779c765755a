"""One connection of the asyncio client: an ``asyncio.Protocol`` that frames requests, writes
what one turn of the event loop sends in one go, decodes answers in ``data_received`` and
matches them to their callers by id, and fails calls whose answer is late."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from . import _frame, _json
from . import _wake
from .errors import ConnectionLost, ProtocolError, ServerError, SmdbError, from_wire

#: Pushes one subscription may have queued before the client drops it from the connection and
#: resumes it from its cursor (a slow consumer never blocks the connection's reader).
SUBSCRIPTION_QUEUE_MAX = 4096
#: Bytes written but not yet sent after which a call waits for the socket to drain.
WRITE_HIGH_WATER = 256 * 1024
#: A call's answer timeout fires at most this many seconds late (requests written within one
#: grain share one deadline mark).
TIMEOUT_GRAIN = 0.1

JSON = Dict[str, Any]
_dumps = _json.dumps
_loads = _json.loads
_FRAME_MAX = _frame.CLIENT_FRAME_BYTES_MAX
_split = _frame.split
_frame_text = _frame.frame
_current_task = asyncio.current_task
_WAKE_NOW = _wake.AVAILABLE
_set_result_now = _wake.set_result_now
_set_exception_now = _wake.set_exception_now
_Future = asyncio.Future
# json's C scanner and encoder (see _json), called directly on the hot path; ``_json.loads`` and
# ``_json.dumps`` take whatever they do not.
_scan = _json._c_scan
_encode = _json._c_encode
_join = "".join


def _no_scan(text: str, at: int) -> Tuple[Any, int]:
    raise ValueError("no C scanner")


if _scan is None:
    _scan = _no_scan


class _Conn(asyncio.Protocol):
    """One connection, an ``asyncio.Protocol``: frames are decoded and answers dispatched by id
    in ``data_received`` (no reader task), and the requests sent during one turn of the event
    loop go out in one ``transport.write``. The answer timeout is one timer per connection, not
    one per request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: Optional[float]) -> None:
        self.loop = loop
        self.timeout = timeout
        self.transport: Optional[asyncio.Transport] = None
        #: id -> (future, op) of each request not yet answered.
        self.pending: Dict[str, Tuple["asyncio.Future[JSON]", str]] = {}
        #: id -> queue of each WATCH_* request not yet answered.
        self.watches: Dict[str, "asyncio.Queue[Optional[JSON]]"] = {}
        self.subs: Dict[Any, "asyncio.Queue[Optional[JSON]]"] = {}
        #: ids answered after their timeout (their late answers are dropped).
        self.expired: Set[str] = set()
        self.next_id = 1
        self.dead: Optional[BaseException] = None
        self._out: List[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._buf = bytearray()
        self._need = 0
        self._paused = False
        self._drained: Optional["asyncio.Future[None]"] = None
        #: (time, id): every request with a smaller id was written by then.
        self._marks: Deque[Tuple[float, int]] = collections.deque()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._grain = min(TIMEOUT_GRAIN, timeout / 10) if timeout else 0.0
        #: Whether ``_dispatch`` wakes the callers at once (inside ``data_received``, where no
        #: task runs) or through the loop.
        self._now = False

    @property
    def alive(self) -> bool:
        return self.dead is None

    # -- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(WRITE_HIGH_WATER)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return
            data = buf  # type: ignore[assignment]
        # The callers whose answers are here run right away (_wake.set_result_now), in order,
        # and usually send again: their requests are written in one go at the end. (A task
        # running here would mean a caller of ours feeds bytes in by hand: then wake through
        # the loop.)
        now = self._now = _WAKE_NOW and _current_task(self.loop) is None
        flushing = self._flush_scheduled
        if now:
            self._flush_scheduled = True  # ``send`` leaves the write to the end of this call
        try:
            payloads, pos, bad = _split(data, 0, _FRAME_MAX)
            dispatch = self._dispatch
            for payload in payloads:
                dispatch(payload)
                if self.dead is not None:  # a caller woken above closed the connection
                    break
            if bad and self.dead is None:
                _frame.decode_frame(data, _FRAME_MAX, pos)  # raises the frame's error
        except _frame.FrameError as e:
            self._now = False
            self._fail(ProtocolError(f"{e.code}: {e}"))
            return
        except (ServerError, ProtocolError) as e:
            self._now = False
            self._fail(e)
            return
        if now:
            self._now = False
            self._flush_scheduled = flushing
            if self._out and not flushing:
                self._flush()
        elif pos and not self._flush_scheduled:
            # The callers woken above run next, in this order, and usually send again: one
            # flush after them writes all they send in one go.
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        if self.dead is not None:
            return
        rest = len(data) - pos
        if rest == 0:
            if buf:
                buf.clear()
            self._need = 0
            return
        if data is buf:
            if pos:
                del buf[:pos]
        else:
            buf += memoryview(data)[pos:]
        # Wait for the whole frame before decoding again (a large frame arrives in pieces).
        self._need = _frame.HEADER_LEN
        if rest >= _frame.HEADER_LEN:
            self._need += int.from_bytes(buf[8:12], "big")

    def eof_received(self) -> Optional[bool]:
        return None

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._buf:
            why: BaseException = ProtocolError(
                "connection closed by the server in the middle of a frame "
                f"({len(self._buf)} bytes of it received)"
            )
        elif exc is not None:
            why = ConnectionLost(f"read failed: {exc}")
        else:
            why = ConnectionLost("connection closed by the server")
        self._fail(why)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    # -- requests ---------------------------------------------------------------------------------

    def send(self, op: str, params: Optional[JSON], queue: Any = None) -> "asyncio.Future[JSON]":
        if self.dead is not None:
            # E.g. a CONNECTION_LIMIT refusal that came in before the HELLO went out.
            raise _copy(self.dead)
        rid = str(self.next_id)
        self.next_id += 1
        head = _HEADS.get(op) or _head(op)
        if params is None:
            text = f'{head}{rid}"}}'
        elif params.__class__ is dict and _encode is not None:
            text = f'{head}{rid}","params":{_join(_encode(params, 0))}}}'
        else:
            text = f'{head}{rid}","params":{_dumps(params)}}}'
        frame = _frame_text(text)
        self._out.append(frame)
        self._out_bytes += len(frame)
        fut = _Future(loop=self.loop)
        self.pending[rid] = (fut, op)
        if queue is not None:
            self.watches[rid] = queue
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        """Writes what ``send`` queued (called once per loop turn, or early by ``drain``)."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        data = b"".join(out)
        out.clear()
        self._out_bytes = 0
        t = self.transport
        if self.dead is not None or t is None or t.is_closing():
            return
        t.write(data)
        if self.timeout is not None:
            now = self.loop.time()
            marks = self._marks
            if marks and now - marks[-1][0] < self._grain:
                marks[-1] = (now, self.next_id)
            else:
                marks.append((now, self.next_id))
            if self._timer is None:
                self._timer = self.loop.call_at(marks[0][0] + self.timeout, self._expire)

    def _expire(self) -> None:
        """Fails the requests that waited ``timeout`` seconds for their answer (with the
        marks' grain: at most ``TIMEOUT_GRAIN`` later); the connection stays."""
        self._timer = None
        t = self.timeout
        if t is None or self.dead is not None:
            return
        now = self.loop.time()
        marks = self._marks
        while marks and marks[0][0] + t <= now:
            _, bound = marks.popleft()
            pending = self.pending
            while pending:
                rid = next(iter(pending))
                if int(rid) >= bound:
                    break
                fut, op = pending.pop(rid)
                self.watches.pop(rid, None)
                if not fut.done():
                    self.expired.add(rid)
                    fut.set_exception(ConnectionLost(f"{op}: no response within {t} s"))
        if marks:
            self._timer = self.loop.call_at(marks[0][0] + t, self._expire)

    async def drain(self) -> None:
        """Writes now and waits while the socket's buffer is over ``WRITE_HIGH_WATER``."""
        if self._out_bytes > WRITE_HIGH_WATER:
            self._flush()
        while self._paused and self.dead is None:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await self._drained

    def _wake_drain(self) -> None:
        w = self._drained
        self._drained = None
        if w is not None and not w.done():
            w.set_result(None)

    # -- answers ----------------------------------------------------------------------------------

    def _dispatch(self, payload: bytes) -> None:
        try:
            # _json.loads, inlined for the common case (UTF-8, one JSON text, nothing around).
            text = payload.decode()
            msg, end = _scan(text, 0)
            if end != len(text):
                raise ValueError("not one JSON text")
        except (ValueError, StopIteration):
            try:
                msg = _loads(payload)
            except ValueError as e:
                raise ProtocolError(f"frame payload is not JSON: {e}") from None
        if msg.__class__ is not dict:
            raise ProtocolError(f"message is not a JSON object: {msg!r}")
        kind = msg.get("type")
        if kind == "response":
            rid = msg.get("id")
            if rid is None:
                # The server refused our bytes (id null) and is closing the connection.
                raise from_wire(msg.get("error"))
            if rid.__class__ is not str:
                rid = str(rid)
            p = self.pending.pop(rid, None)
            if p is None:
                if rid in self.expired:
                    self.expired.discard(rid)
                    return
                raise ProtocolError(f"response for request {rid}, which is not pending")
            fut = p[0]
            queue = self.watches.pop(rid, None) if self.watches else None
            if fut.done():
                return
            if msg.get("status") == "ok":
                result = msg.get("result")
                if queue is not None and isinstance(result, dict):
                    self.subs[result.get("subscription_id")] = queue
                if result is None:
                    result = {}
                if self._now:
                    _set_result_now(fut, result)
                else:
                    fut.set_result(result)
            elif self._now:
                _set_exception_now(fut, from_wire(msg.get("error")))
            else:
                fut.set_exception(from_wire(msg.get("error")))
        elif kind in ("event", "subscription_lagged", "slots_moved"):
            q = self.subs.get(msg.get("subscription_id"))
            if q is None:
                return
            try:
                q.put_nowait(msg)
            except asyncio.QueueFull:
                # The consumer is SUBSCRIPTION_QUEUE_MAX behind: drop it here; it resumes from
                # its last delivered cursor.
                del self.subs[msg.get("subscription_id")]
                _close_queue(q)

    def forget(self, subscription_id: Any) -> None:
        self.subs.pop(subscription_id, None)

    def _fail(self, why: BaseException) -> None:
        if self.dead is None:
            self.dead = why
        for fut, _ in self.pending.values():
            if not fut.done():
                fut.set_exception(_copy(why))
        self.pending.clear()
        self.watches.clear()
        for q in self.subs.values():
            _close_queue(q)
        self.subs.clear()
        self._out.clear()
        self._out_bytes = 0
        self._marks.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake_drain()
        if self.transport is not None:
            try:
                self.transport.close()
            except Exception:
                pass

    def close(self) -> None:
        self._fail(ConnectionLost("connection closed by the client"))


def _head(op: str) -> str:
    """The request's JSON up to the id's value, for ``op`` (cached)."""
    head = '{"type":"request","op":' + _dumps(op) + ',"id":"'
    if len(_HEADS) < 256:
        _HEADS[op] = head
    return head


_HEADS: Dict[str, str] = {}


def _close_queue(q: "asyncio.Queue[Optional[JSON]]") -> None:
    """Tells the subscription its queue ended (``None``), making room if it must."""
    while True:
        try:
            q.put_nowait(None)
            return
        except asyncio.QueueFull:
            q.get_nowait()


def _copy(e: BaseException) -> BaseException:
    if isinstance(e, ServerError):
        return from_wire({"code": e.code, "message": e.message, "retryable": e.retryable, "details": e.details})
    return type(e)(*e.args) if isinstance(e, SmdbError) else ConnectionLost(str(e))
