"""The Python client (asyncio and sync) against the real server binary."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import socket
import ssl
import threading
import time

import pytest

import smdb
from smdb import aio
from conftest import ORDER, TESTDATA, TICK


def run(coro):
    return asyncio.run(coro)


def test_every_op_async(server):
    async def main():
        c = await aio.Client.connect("127.0.0.1", server.port, client_name="pytest")
        assert c.hello_result["server_name"] == "smdb"
        assert (await c.ping()) == {"pong": True}
        assert (await c.info())["shards"] >= 1
        put = await c.put_machine("order", 1, ORDER)
        assert put["created"] is True
        assert (await c.put_machine("order", 1, ORDER))["created"] is False
        assert (await c.get_machine("order"))["version"] == 1
        assert (await c.list_machines())["machines"] == [{"machine": "order", "versions": [1]}]
        sub = await c.watch_instance("o-1")
        allsub = await c.watch_all(machines=["order"])
        with pytest.raises(smdb.MachineNotFoundError):
            await c.create_instance("nope", 1, "x")
        created = await c.create_instance("order", 1, "o-1", {"total": 30})
        assert created["state"] == "new"
        with pytest.raises(smdb.InstanceExistsError) as e:
            await c.create_instance("order", 1, "o-1", {"total": 30})
        assert e.value.details == {"id": "o-1"} and not e.value.retryable
        once = await c.create_instance("order", 1, "o-2", {"total": 5}, idempotency_key="k")
        again = await c.create_instance("order", 1, "o-2", {"total": 5}, idempotency_key="k")
        assert once["applied"] is True and again["applied"] is False
        with pytest.raises(smdb.GuardFailedError) as g:
            await c.apply_event("o-1", "pay", {"amount": 10})
        assert isinstance(g.value, smdb.ServerError) and g.value.code == "GUARD_FAILED"
        paid = await c.apply_event("o-1", "pay", {"amount": 30}, expected_state="new")
        assert (paid["from_state"], paid["to_state"]) == ("new", "paid")
        with pytest.raises(smdb.ConflictError):
            await c.apply_event("o-1", "ship", expected_state="new")
        got = await c.get_instance("o-1")
        assert got["state"] == "paid" and got["context"] == {"amount": 30, "total": 30}
        page = await c.list_instances(machine="order", limit=10)
        assert [i["id"] for i in page["instances"]] == ["o-1", "o-2"]
        hist = await c.get_history("o-1", from_=1, limit=10)
        assert [h["event"] for h in hist["events"]] == ["pay"]
        b = await c.batch([smdb.Request("GET_INSTANCE", {"id": "o-1"}), smdb.Request("GET_INSTANCE", {"id": "zz"})])
        assert b["results"][0]["status"] == "ok" and b["results"][1]["error"]["code"] == "INSTANCE_NOT_FOUND"
        with pytest.raises(smdb.BatchAbortedError):
            await c.batch([smdb.apply_event("o-1", "nope")], atomic=True)
        assert (await c.delete_instance("o-2"))["deleted"] is True
        ev = await sub.next(10)
        assert ev["event"] == "pay" and ev["instance_id"] == "o-1"
        ev = await allsub.next(10)
        assert ev["event"] == "pay" and allsub.cursor == ev["cursor"]
        assert (await c.unwatch(sub.id))["removed"] is True
        try:
            st = await c.replication_status()
            assert st["role"]
        except smdb.UnknownOperationError:
            pass  # a server built before replication
        try:
            assert isinstance(await c.promote(), dict)
        except smdb.ServerError as e:
            assert e.code
        assert (await c.bye()) == {}
        await c.close()

    run(main())


def test_every_op_sync(server):
    with smdb.Client("127.0.0.1", server.port) as c:
        assert c.ping() == {"pong": True}
        c.put_machine("order", 1, ORDER)
        assert c.list_machines()["machines"][0]["machine"] == "order"
        assert c.get_machine("order", 1)["checksum"]
        sub = c.watch_all()
        c.create_instance("order", 1, "s-1", {"total": 1})
        with pytest.raises(smdb.GuardFailedError):
            c.apply_event("s-1", "pay", {"amount": 0})
        c.apply_event("s-1", "pay", {"amount": 1})
        assert next(iter(sub))["to_state"] == "paid"
        assert c.get_instance("s-1")["state"] == "paid"
        assert len(c.list_instances()["instances"]) == 1
        assert len(c.get_history("s-1")["events"]) == 1
        assert c.batch([smdb.Request("GET_INSTANCE", {"id": "s-1"})])["results"][0]["status"] == "ok"
        assert c.delete_instance("s-1")["deleted"] is True
        assert c.info()["role"] == "standalone"
        assert c.call("PING") == {"pong": True}
        sub.close()


def test_find_pages_and_scan(server):
    accounts = {"states": ["open"], "initial": "open", "indexes": ["ctx.customer"],
                "transitions": [{"from": "open", "event": "set", "to": "open"}]}
    with smdb.Client("127.0.0.1", server.port) as c:
        c.put_machine("acct", 1, accounts)
        for i in range(5):
            c.create_instance("acct", 1, f"a{i}", {"customer": "c-1" if i % 2 == 0 else "c-2", "n": i})
        pages = list(c.find_pages("acct", {"ctx.customer": "c-1"}, limit=2))
        assert [[i["id"] for i in p["instances"]] for p in pages] == [["a0", "a2"], ["a4"]]
        assert pages[0]["versions"] == [1] and "context" not in pages[0]["instances"][0]
        with pytest.raises(smdb.ServerError) as e:
            c.find_instances("acct", {"ctx.n": 1})
        assert e.value.code == "BAD_REQUEST" and e.value.details["index"] == "ctx.n"
        scanned = c.scan_instances("acct", {"ctx.n": {"gte": 3}}, include_context=True)
        assert [i["context"]["n"] for i in scanned["instances"]] == [3, 4]


def test_a_pipelined_burst_of_ten_thousand_answers_in_order(server):
    async def main():
        c = await aio.Client.connect("127.0.0.1", server.port)
        await c.put_machine("tick", 1, TICK)
        await c.create_instance("tick", 1, "p-1")
        reqs = [smdb.apply_event("p-1", "tick", {"n": i}) for i in range(10_000)]
        results = await c.pipeline(reqs)
        assert len(results) == 10_000
        last = 0
        for i, r in enumerate(results):
            assert r["context"]["n"] == i
            assert r["wal_offset"] > last
            last = r["wal_offset"]
        # The same through concurrent tasks on one connection.
        got = await asyncio.gather(*(c.get_instance("p-1") for _ in range(1000)))
        assert all(g["event_count"] == 10_000 for g in got)
        await c.close()

    run(main())


def ticks(port, start, end):
    with smdb.Client("127.0.0.1", port) as c:
        for n in range(start, end):
            c.apply_event("r-1", "tick", {"n": n})


def test_a_subscription_resumes_across_a_server_restart(server):
    async def main():
        c = await aio.Client.connect("127.0.0.1", server.port)
        await c.put_machine("tick", 1, TICK)
        await c.create_instance("tick", 1, "r-1")
        sub = await c.watch_all()
        inst = await c.watch_instance("r-1")
        await asyncio.to_thread(ticks, server.port, 0, 5)
        got = [(await sub.next(10))["payload"]["n"] for _ in range(3)]
        got_inst = [(await inst.next(10))["payload"]["n"] for _ in range(3)]
        await asyncio.to_thread(server.restart)
        await asyncio.to_thread(ticks, server.port, 5, 10)
        while len(got) < 10:
            ev = await sub.next(20)
            assert ev is not None, f"events so far {got}"
            got.append(ev["payload"]["n"])
        while len(got_inst) < 10:
            ev = await inst.next(20)
            assert ev is not None, f"events so far {got_inst}"
            got_inst.append(ev["payload"]["n"])
        assert got == list(range(10)) and got_inst == list(range(10))
        assert sub.reconnects >= 1
        assert await sub.next(0.3) is None, "no duplicate"
        await c.close()

    run(main())


def test_a_retryable_refusal_is_retried(make_server):
    s = make_server(network="max_connections = 1\n")
    first = smdb.Client("127.0.0.1", s.port)
    with pytest.raises(smdb.ConnectionLimitError) as e:
        smdb.Client("127.0.0.1", s.port, retry=smdb.RetryPolicy(attempts=1))
    assert e.value.retryable
    threading.Timer(0.3, first.close).start()
    started = time.monotonic()
    with smdb.Client("127.0.0.1", s.port) as c:
        assert time.monotonic() - started >= 0.25
        assert c.ping() == {"pong": True}

    # A lost connection: a read is retried on a new connection; an unkeyed write is not.
    async def main():
        c = await aio.Client.connect("127.0.0.1", s.port)
        await c.put_machine("tick", 1, TICK)
        await c.create_instance("tick", 1, "t-1")
        # The connection dies with the request in flight.
        write = asyncio.ensure_future(c.apply_event("t-1", "tick"))
        await asyncio.sleep(0)
        c._conn.transport.abort()
        with pytest.raises(smdb.ConnectionLost):
            await write
        assert c.retries == 0, "a write without an idempotency key is not resent"
        assert (await c.ping())["pong"] is True  # a new connection
        read = asyncio.ensure_future(c.get_instance("t-1"))
        await asyncio.sleep(0)
        c._conn.transport.abort()
        assert (await read)["id"] == "t-1"
        assert c.retries >= 1 and c.connects >= 3
        await c.close()

    run(main())


def fake_server(data: bytes) -> int:
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()

    def serve():
        while True:
            try:
                conn, _ = lst.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                conn.recv(65536)  # the HELLO: read it, so closing sends FIN, not RST
            except OSError:
                pass
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            time.sleep(0.2)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return lst.getsockname()[1]


def vector(name):
    import json

    frames = json.loads((TESTDATA / "frames.json").read_text())["frames"]
    return bytes.fromhex(next(f for f in frames if f["name"] == name)["hex"])


@pytest.mark.parametrize(
    "name,text",
    [
        ("bad_magic", "bad frame magic"),
        ("bad_crc", "CRC32C mismatch"),
        ("truncated_payload", "in the middle of a frame"),
        ("truncated_header", "in the middle of a frame"),
    ],
)
def test_malformed_and_truncated_frames_are_clear_errors(name, text):
    port = fake_server(vector(name))
    with pytest.raises(smdb.ProtocolError, match=text):
        run(aio.Client.connect("127.0.0.1", port, retry=smdb.RetryPolicy(attempts=1)))


def test_a_refusal_with_id_null_surfaces_its_code():
    port = fake_server(vector("response_null_id"))
    with pytest.raises(smdb.ChecksumMismatchError):
        run(aio.Client.connect("127.0.0.1", port, retry=smdb.RetryPolicy(attempts=1)))


def test_auth_and_mutual_tls(make_server):
    token = "python-test-token"
    digest = hashlib.sha256(token.encode()).hexdigest()
    tls = TESTDATA / "tls"
    s = make_server(
        f'[auth]\nrequired = true\ntoken_hashes = ["{digest}"]\n'
        f'[tls]\nenabled = true\ncert_path = "{tls / "server.pem"}"\nkey_path = "{tls / "server.key"}"\n'
        f'client_ca_path = "{tls / "ca.pem"}"\n'
    )
    ctx = ssl.create_default_context(cafile=str(tls / "ca.pem"))
    ctx.load_cert_chain(str(tls / "client.pem"), str(tls / "client.key"))
    no_retry = smdb.RetryPolicy(attempts=1)
    with smdb.Client("localhost", s.port, token=token, ssl=ctx) as c:
        assert c.hello_result["auth_required"] is True
        c.put_machine("order", 1, ORDER)
        assert len(c.list_machines()["machines"]) == 1
    with smdb.Client("localhost", s.port, ssl=ctx) as anon:
        with pytest.raises(smdb.UnauthorizedError):
            anon.list_machines()
    with pytest.raises(smdb.AuthFailedError):
        smdb.Client("localhost", s.port, token="wrong", ssl=ctx, retry=no_retry)
    bare = ssl.create_default_context(cafile=str(tls / "ca.pem"))
    with pytest.raises(smdb.SmdbError):
        # No client certificate: the server ends the handshake.
        with smdb.Client("localhost", s.port, token=token, ssl=bare, retry=no_retry) as c:
            c.ping()
    with pytest.raises(smdb.SmdbError):
        smdb.Client("127.0.0.1", s.port, token=token, retry=no_retry)  # plaintext


def _fake_server(lst, answer):
    """Accepts one connection on ``lst`` and answers each request with ``answer(req)`` as an ok
    result (``None``: no answer at all), until the client closes."""
    conn, _ = lst.accept()
    buf = b""
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            buf += data
            while True:
                got = smdb.decode_frame(buf)
                if got is None:
                    break
                payload, end = got
                buf = buf[end:]
                req = json.loads(payload)
                result = answer(req)
                if result is not None:
                    msg = {"type": "response", "id": req["id"], "status": "ok", "result": result}
                    conn.sendall(smdb.encode_frame(json.dumps(msg).encode()))


def test_an_answer_past_the_timeout_fails_the_call_and_not_the_connection():
    """A server that answers the first PING late: that call fails after ``timeout`` with
    ConnectionLost, the late answer is dropped, and the connection serves the next call."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()

    pings = 0

    def answer(req):
        nonlocal pings
        if req["op"] == "PING":
            pings += 1
            if pings == 1:
                time.sleep(0.6)
        return {"pong": True} if req["op"] == "PING" else {}

    serve = functools.partial(_fake_server, lst, answer)

    threading.Thread(target=serve, daemon=True).start()

    async def main():
        c = await aio.Client.connect("127.0.0.1", lst.getsockname()[1], timeout=0.2)
        started = time.monotonic()
        with pytest.raises(smdb.ConnectionLost, match="PING: no response within 0.2 s"):
            await c.call("PING")
        waited = time.monotonic() - started
        assert 0.2 <= waited < 0.5, waited
        await asyncio.sleep(0.6)  # the late answer arrives and is dropped
        assert (await c.call("PING")) == {"pong": True}
        assert c.connects == 1
        await c.close()

    try:
        run(main())
    finally:
        lst.close()


def test_calls_made_in_one_loop_turn_go_out_in_one_write(server):
    async def main():
        c = await aio.Client.connect("127.0.0.1", server.port)
        writes = []
        transport = c._conn.transport
        real_write = transport.write

        def counting_write(data):
            writes.append(len(data))
            real_write(data)

        transport.write = counting_write
        assert await asyncio.gather(*(c.ping() for _ in range(8))) == [{"pong": True}] * 8
        assert len(writes) == 1, writes
        # Callers woken by answers send again: one write per batch of answers read, fewer than
        # one per call (at most 1 + 8 when each answer came in its own packet).
        async def twice():
            await c.ping()
            await c.ping()

        writes.clear()
        await asyncio.gather(*(twice() for _ in range(8)))
        assert 2 <= len(writes) <= 9, writes
        await c.close()

    run(main())


def test_callers_woken_by_answers_run_in_their_own_context_and_may_close(server):
    """Answers wake their callers inside data_received (smdb._wake.set_result_now): each
    caller still runs in its own task and context; one that closes the connection there fails
    the others' calls with ConnectionLost, and nothing else breaks."""
    import contextvars

    var = contextvars.ContextVar("who", default=None)

    async def main():
        c = await aio.Client.connect("127.0.0.1", server.port, retry=smdb.RetryPolicy(attempts=1))

        async def caller(k):
            var.set(k)
            task = asyncio.current_task()
            await c.ping()
            assert var.get() == k and asyncio.current_task() is task
            await c.ping()
            assert var.get() == k
            return k

        assert await asyncio.gather(*(caller(k) for k in range(8))) == list(range(8))

        async def closer():
            await c.ping()
            await c.close()

        async def other():
            await c.ping()
            await asyncio.sleep(0)  # the closer's answer and ours come in one read, mostly
            return await c.ping()

        results = await asyncio.gather(closer(), *(other() for _ in range(7)), return_exceptions=True)
        assert results[0] is None
        for r in results[1:]:
            assert r == {"pong": True} or isinstance(r, smdb.ConnectionLost), r
        assert (await c.ping())["pong"] is True  # a new connection
        await c.close()

    run(main())


def test_a_call_can_be_cancelled_and_timed_out_by_asyncio():
    """cancel() and asyncio.wait_for work on a call whose answer never comes."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()

    # Only the HELLO is ever answered.
    serve = functools.partial(_fake_server, lst, lambda req: {} if req["op"] == "HELLO" else None)

    threading.Thread(target=serve, daemon=True).start()

    async def main():
        c = await aio.Client.connect("127.0.0.1", lst.getsockname()[1], timeout=None)
        t = asyncio.ensure_future(c.call("PING"))
        await asyncio.sleep(0.05)
        assert not t.done()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.ping(), 0.1)
        assert c._conn.alive and c.connects == 1
        await c.close()

    try:
        run(main())
    finally:
        lst.close()


def test_answers_the_fast_path_does_not_take_still_work():
    """An answer with whitespace around its JSON goes through json.loads (HELLO succeeds); a
    payload that is not JSON is a ProtocolError."""
    hello = b' {"type":"response","id":"1","status":"ok","result":{"protocol_version":1}}\n'
    port = fake_server(smdb.encode_frame(hello))

    async def main():
        c = await aio.Client.connect("127.0.0.1", port, retry=smdb.RetryPolicy(attempts=1))
        assert c.hello_result == {"protocol_version": 1}
        await c.close()

    run(main())
    port = fake_server(smdb.encode_frame(b"not json"))
    with pytest.raises(smdb.ProtocolError, match="not JSON"):
        run(aio.Client.connect("127.0.0.1", port, retry=smdb.RetryPolicy(attempts=1)))
