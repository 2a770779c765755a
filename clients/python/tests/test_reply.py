"""smdb._reply.Reply, the future-like answer of one request, under asyncio's own Task (no
server: what is tested is the object's contract with the event loop)."""

import asyncio

import pytest

from smdb._reply import ERROR, RESULT, Reply


def test_a_task_awaiting_a_reply_is_woken_at_once_by_complete_now():
    async def main():
        loop = asyncio.get_running_loop()
        r = Reply(loop)
        assert asyncio.isfuture(r) and not r.done()
        seen = []

        async def waiter():
            seen.append(await r)
            return "after"

        t = loop.create_task(waiter())
        await asyncio.sleep(0)  # the task runs up to the await
        # complete_now runs the task's wake-up here; it must not run inside another task,
        # so call it from a plain loop callback (as data_received is).
        loop.call_soon(r.complete_now, RESULT, 42)
        await asyncio.sleep(0)
        assert seen == [42] and t.done() and t.result() == "after"
        assert r.result() == 42 and r.exception() is None

    asyncio.run(main())


def test_complete_soon_errors_cancel_and_callbacks():
    async def main():
        loop = asyncio.get_running_loop()
        r = Reply(loop)
        t = loop.create_task(_await(r))
        await asyncio.sleep(0)
        r.complete_soon(ERROR, KeyError("x"))
        with pytest.raises(KeyError):
            await t
        r.complete_soon(RESULT, 1)  # a second completion is ignored
        assert isinstance(r.exception(), KeyError)

        r = Reply(loop)
        t = loop.create_task(_await(r))
        await asyncio.sleep(0)
        assert t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert r.cancelled() and not r.cancel()
        r.complete_now(RESULT, 1)  # a late answer after a cancel is ignored
        assert r.cancelled()

        r = Reply(loop)
        got = []
        r.add_done_callback(lambda f: got.append(("a", f.result())))
        r.add_done_callback(lambda f: got.append(("b", f.result())))
        loop.call_soon(r.complete_now, RESULT, 7)
        await asyncio.sleep(0.01)
        assert got == [("a", 7), ("b", 7)]
        r.add_done_callback(lambda f: got.append(("c", f.result())))  # already done: soon
        await asyncio.sleep(0)
        assert got[-1] == ("c", 7)
        assert await r == 7  # awaiting a done reply returns at once

    asyncio.run(main())


def test_wait_for_and_gather_take_replies():
    async def main():
        loop = asyncio.get_running_loop()
        r = Reply(loop)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_await(r), 0.01)
        assert r.cancelled()
        a, b = Reply(loop), Reply(loop)
        loop.call_later(0.01, a.complete_now, RESULT, "a")
        loop.call_later(0.01, b.complete_soon, RESULT, "b")
        assert await asyncio.gather(_await(a), _await(b)) == ["a", "b"]

    asyncio.run(main())


async def _await(r):
    return await r
