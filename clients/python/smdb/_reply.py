"""The awaitable answer of one request: a small future that can wake its waiting task at once.

An ``asyncio.Future`` wakes the task awaiting it through ``loop.call_soon``: one handle per
answer, and the woken callers run one loop turn after the read that brought their answers (a
second turn, and a second ``epoll_wait``, per read). A ``Reply`` completed by the connection's
``data_received`` instead runs the waiting task's wake-up right there (``complete_now``), so the
callers run, and send their next requests, inside the same turn; the connection then writes
them all in one go. Everywhere else (timeouts, a lost connection, a close from a task) it
completes through ``call_soon`` like a Future (``complete_soon``).

It speaks the protocol asyncio's ``Task`` uses for future-like objects
(``_asyncio_future_blocking``, ``add_done_callback(fn, context=...)``, ``result()``,
``cancel(msg)``, ``get_loop()``), so any task can await it, ``asyncio.isfuture`` is true
for it, and cancelling the awaiting task works as with a Future."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Generator, List, Optional, Tuple

_PENDING, _RESULT, _ERROR, _CANCELLED = 0, 1, 2, 3

Callback = Callable[["Reply"], Any]


class Reply:
    """A future-like answer (see the module's docstring). Not thread-safe, like a Future."""

    # Set True while a task awaits it (the Task protocol; asyncio.isfuture looks at it).
    _asyncio_future_blocking = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._state = _PENDING
        self._value: Any = None
        # The first callback (almost always the only one: the awaiting task's wake-up) and its
        # context; more go to a list.
        self._cb: Optional[Callback] = None
        self._ctx: Optional[contextvars.Context] = None
        self._more: Optional[List[Tuple[Callback, Optional[contextvars.Context]]]] = None

    # -- the Future protocol asyncio's Task relies on -----------------------------------------

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def result(self) -> Any:
        s = self._state
        if s == _RESULT:
            return self._value
        if s == _PENDING:
            raise asyncio.InvalidStateError("result is not ready")
        if s == _CANCELLED:
            raise asyncio.CancelledError(*self._value)
        raise self._value

    def exception(self) -> Optional[BaseException]:
        s = self._state
        if s == _PENDING:
            raise asyncio.InvalidStateError("exception is not set")
        if s == _CANCELLED:
            raise asyncio.CancelledError(*self._value)
        return self._value if s == _ERROR else None

    def add_done_callback(self, fn: Callback, *, context: Optional[contextvars.Context] = None) -> None:
        if context is None:
            context = contextvars.copy_context()
        if self._state != _PENDING:
            self._loop.call_soon(fn, self, context=context)
        elif self._cb is None:
            self._cb, self._ctx = fn, context
        else:
            if self._more is None:
                self._more = []
            self._more.append((fn, context))

    def remove_done_callback(self, fn: Callback) -> int:
        n = 0
        if self._cb == fn:
            self._cb = self._ctx = None
            n += 1
        if self._more:
            keep = [(f, c) for f, c in self._more if f != fn]
            n += len(self._more) - len(keep)
            self._more = keep
        return n

    def cancel(self, msg: Any = None) -> bool:
        if self._state != _PENDING:
            return False
        self._state = _CANCELLED
        self._value = () if msg is None else (msg,)
        self._schedule()
        return True

    def set_result(self, value: Any) -> None:
        self.complete_soon(_RESULT, value)

    def set_exception(self, exc: BaseException) -> None:
        self.complete_soon(_ERROR, exc)

    def __await__(self) -> Generator["Reply", None, Any]:
        if self._state == _PENDING:
            self._asyncio_future_blocking = True
            yield self
        if self._state == _PENDING:
            raise RuntimeError("await wasn't used with a task")
        return self.result()

    __iter__ = __await__

    # -- completion ---------------------------------------------------------------------------

    def complete_soon(self, state: int, value: Any) -> None:
        """Completes (``_RESULT`` or ``_ERROR``) and wakes the waiters through the loop."""
        if self._state != _PENDING:
            return
        self._state, self._value = state, value
        self._schedule()

    def complete_now(self, state: int, value: Any) -> None:
        """Completes and runs the waiting task's wake-up now: only where no task is running
        (a protocol callback such as ``data_received``)."""
        if self._state != _PENDING:
            return
        self._state, self._value = state, value
        cb = self._cb
        if cb is None:
            return
        ctx = self._ctx
        self._cb = self._ctx = None
        try:
            ctx.run(cb, self)  # type: ignore[union-attr]
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:  # a Task's wake-up does not raise; anything else might
            self._loop.call_exception_handler({"message": "smdb reply callback failed", "exception": e})
        more = self._more
        if more:
            self._more = None
            for fn, c in more:
                self._loop.call_soon(fn, self, context=c)

    def _schedule(self) -> None:
        call_soon = self._loop.call_soon
        if self._cb is not None:
            call_soon(self._cb, self, context=self._ctx)
            self._cb = self._ctx = None
        if self._more:
            for fn, c in self._more:
                call_soon(fn, self, context=c)
            self._more = None


RESULT, ERROR = _RESULT, _ERROR
