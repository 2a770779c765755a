"""Completing an answer's future and waking its caller at once, inside ``data_received``.

``Future.set_result`` wakes the task awaiting the future through ``loop.call_soon``: a handle
per answer, and the woken callers run one loop turn after the read that brought their answers
(a second turn, and a second ``epoll_wait``, per read). ``set_result_now`` takes the future's
done-callbacks off it (the awaiting task's wake-up, almost always the only one), completes it,
and runs them right there, each in its own context: the callers run, and send their next
requests, in the same turn, and the connection writes them all in one go.

Only where no task is running (a protocol callback such as ``data_received``: a task's step
may not start inside another's). It relies on ``Future._callbacks`` (a list of ``(callback,
context)``, in the C and the pure-Python Future of CPython 3.9 on); where that is missing or
looks different, ``AVAILABLE`` is False and the futures complete the ordinary way."""

from __future__ import annotations

import asyncio
from typing import Any


def _check() -> bool:
    loop = asyncio.new_event_loop()
    try:
        f: "asyncio.Future[Any]" = asyncio.Future(loop=loop)  # as _conn makes them
        cb = lambda _f: None  # noqa: E731
        f.add_done_callback(cb)
        got = getattr(f, "_callbacks", None)
        if not isinstance(got, list) or len(got) != 1 or len(got[0]) != 2 or got[0][0] is not cb:
            return False
        f.remove_done_callback(cb)
        return not f._callbacks
    except Exception:
        return False
    finally:
        loop.close()


AVAILABLE = _check()


def set_result_now(fut: "asyncio.Future[Any]", value: Any) -> None:
    """``fut.set_result(value)``, its done-callbacks run now instead of through the loop."""
    cbs = fut._callbacks  # type: ignore[attr-defined]
    if not cbs:
        fut.set_result(value)
        return
    if len(cbs) == 1:  # the awaiting task's wake-up
        cb, ctx = cbs[0]
        fut.remove_done_callback(cb)
        fut.set_result(value)
        try:
            ctx.run(cb, fut)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:
            _report(fut, cb, e)
        return
    for cb, _ in cbs:
        fut.remove_done_callback(cb)
    fut.set_result(value)
    _run(fut, cbs)


def set_exception_now(fut: "asyncio.Future[Any]", exc: BaseException) -> None:
    """``fut.set_exception(exc)``, its done-callbacks run now instead of through the loop."""
    cbs = fut._callbacks  # type: ignore[attr-defined]
    for cb, _ in cbs:
        fut.remove_done_callback(cb)
    fut.set_exception(exc)
    _run(fut, cbs)


def _run(fut: "asyncio.Future[Any]", cbs: Any) -> None:
    for cb, ctx in cbs:
        try:
            ctx.run(cb, fut)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:
            _report(fut, cb, e)


def _report(fut: "asyncio.Future[Any]", cb: Any, e: BaseException) -> None:
    """As the loop does for a failing callback."""
    fut.get_loop().call_exception_handler({"message": f"exception in callback {cb!r}", "exception": e, "future": fut})
