"""smdb._wake: completing a future and running its waiters at once (what data_received does
with each answer), under asyncio's own Task; no server: the contract tested is the one with
the event loop."""

import asyncio
import contextvars
import platform

import pytest

from smdb import _wake


def test_available_on_cpython():
    if platform.python_implementation() == "CPython":
        assert _wake.AVAILABLE


@pytest.mark.skipif(not _wake.AVAILABLE, reason="Future._callbacks not usable here")
def test_the_awaiting_task_runs_before_set_result_now_returns():
    var = contextvars.ContextVar("v", default="loop")

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        steps = []

        async def waiter():
            var.set("task")
            steps.append(("got", await fut, var.get()))
            return "end"

        t = loop.create_task(waiter())
        await asyncio.sleep(0)

        def answer():  # a plain loop callback, as data_received is
            _wake.set_result_now(fut, 42)
            steps.append(("after", t.done(), var.get()))

        loop.call_soon(answer)
        await asyncio.sleep(0)
        assert steps == [("got", 42, "task"), ("after", True, "loop")]
        assert t.result() == "end"

        fut = loop.create_future()
        t = loop.create_task(_await(fut))
        await asyncio.sleep(0)
        loop.call_soon(_wake.set_exception_now, fut, KeyError("k"))
        await asyncio.sleep(0)
        assert t.done() and isinstance(t.exception(), KeyError)

        # Without waiters, and with several.
        fut = loop.create_future()
        _wake.set_result_now(fut, 1)
        assert fut.result() == 1
        fut = loop.create_future()
        got = []
        fut.add_done_callback(lambda f: got.append(("a", f.result())))
        fut.add_done_callback(lambda f: got.append(("b", f.result())))
        _wake.set_result_now(fut, 2)
        assert got == [("a", 2), ("b", 2)]

    asyncio.run(main())


async def _await(f):
    return await f
