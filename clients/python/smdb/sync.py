"""A thin synchronous wrapper: the asyncio client on an event loop in a background thread.
Every method blocks until its answer; subscriptions are plain iterators."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Coroutine, Iterator, List, Optional, Sequence, TypeVar, Union

from .client import JSON, Client as AsyncClient, ConnectOptions, Request, Subscription as AsyncSubscription
from ._lifecycle import add_reply
from .errors import ServerError

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="smdb-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class Client:
    """``smdb.Client("127.0.0.1", 7401, token=...)``: the same calls as the asyncio client,
    blocking."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 7401, *, options: Optional[ConnectOptions] = None, **kw: Any
    ) -> None:
        self._loop = _Loop()
        try:
            self._client: AsyncClient = self._loop.run(AsyncClient.connect(host, port, options=options, **kw))
        except BaseException:
            self._loop.stop()
            raise

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.thread.is_alive():
            self._loop.run(self._client.close())
            self._loop.stop()

    @property
    def hello_result(self) -> Optional[JSON]:
        return self._client.hello_result

    @property
    def retries(self) -> int:
        return self._client.retries

    @property
    def is_cluster(self) -> bool:
        return self._client.is_cluster

    @property
    def cluster_map_epoch(self) -> int:
        return self._client.cluster_map_epoch

    @property
    def cluster_redirects(self) -> int:
        return self._client.cluster_redirects

    def refresh_cluster_map(self) -> None:
        self._loop.run(self._client.refresh_cluster_map())

    def call(self, op: str, params: Optional[JSON] = None) -> JSON:
        return self._loop.run(self._client.call(op, params))

    def pipeline(self, requests: Sequence[Request]) -> List[Union[JSON, ServerError]]:
        return self._loop.run(self._client.pipeline(requests))

    def ping(self) -> JSON:
        return self._loop.run(self._client.ping())

    def info(self) -> JSON:
        return self._loop.run(self._client.info())

    def auth(self, token: str) -> JSON:
        return self._loop.run(self._client.auth(token))

    def bye(self) -> JSON:
        return self._loop.run(self._client.bye())

    def put_machine(self, machine: str, version: int, definition: JSON) -> JSON:
        return self._loop.run(self._client.put_machine(machine, version, definition))

    def get_machine(self, machine: str, version: Optional[int] = None) -> JSON:
        return self._loop.run(self._client.get_machine(machine, version))

    def list_machines(self) -> JSON:
        return self._loop.run(self._client.list_machines())

    def create_instance(self, machine: str, version: int, id: str, context: Optional[JSON] = None, **kw: Any) -> JSON:
        return self._loop.run(self._client.create_instance(machine, version, id, context, **kw))

    def get_instance(self, id: str) -> JSON:
        return self._loop.run(self._client.get_instance(id))

    def list_instances(self, **kw: Any) -> JSON:
        return self._loop.run(self._client.list_instances(**kw))

    def find_instances(self, machine: str, where: JSON, **kw: Any) -> JSON:
        return self._loop.run(self._client.find_instances(machine, where, **kw))

    def find_pages(self, machine: str, where: JSON, **kw: Any) -> Iterator[JSON]:
        """Every page of FIND_INSTANCES, fetched as the iteration asks for it."""
        while True:
            page = self.find_instances(machine, where, **kw)
            yield page
            if page.get("next_cursor") is None:
                return
            kw["cursor"] = page["next_cursor"]

    def scan_instances(self, machine: str, where: Optional[JSON] = None, **kw: Any) -> JSON:
        return self._loop.run(self._client.scan_instances(machine, where, **kw))

    def migrate_instances(self, machine: str, from_version: int, to_version: int, **kw: Any) -> JSON:
        """One MIGRATE_INSTANCES call (``states``, ``state``, ``where``, ``dry_run``, ``limit``,
        ``cursor`` as the asyncio client's)."""
        return self._loop.run(self._client.migrate_instances(machine, from_version, to_version, **kw))

    def migrate_pages(self, machine: str, from_version: int, to_version: int, **kw: Any) -> Iterator[JSON]:
        """Every MIGRATE_INSTANCES call from ``cursor`` (or the start) to the end, made as the
        iteration asks for it."""
        while True:
            reply = self.migrate_instances(machine, from_version, to_version, **kw)
            yield reply
            if reply.get("cursor") is None:
                return
            kw["cursor"] = reply["cursor"]

    def migrate_to_end(self, machine: str, from_version: int, to_version: int, *,
                       on_call: Optional[Callable[[JSON], Any]] = None, **kw: Any) -> JSON:
        """MIGRATE_INSTANCES to the end: the replies summed; ``on_call`` sees each one."""
        return _summed(self.migrate_pages(machine, from_version, to_version, **kw), on_call)

    def delete_instances(self, machine: str, **kw: Any) -> JSON:
        """One DELETE_INSTANCES call (``state``, ``where``, ``updated_before``, ``dry_run``,
        ``limit``, ``cursor``)."""
        return self._loop.run(self._client.delete_instances(machine, **kw))

    def delete_pages(self, machine: str, **kw: Any) -> Iterator[JSON]:
        """Every DELETE_INSTANCES call to the end (see ``migrate_pages``)."""
        while True:
            reply = self.delete_instances(machine, **kw)
            yield reply
            if reply.get("cursor") is None:
                return
            kw["cursor"] = reply["cursor"]

    def delete_to_end(self, machine: str, *, on_call: Optional[Callable[[JSON], Any]] = None,
                      **kw: Any) -> JSON:
        """DELETE_INSTANCES to the end, summed (see ``migrate_to_end``)."""
        return _summed(self.delete_pages(machine, **kw), on_call)

    def delete_instance(self, id: str) -> JSON:
        return self._loop.run(self._client.delete_instance(id))

    def apply_event(self, instance_id: str, event: str, payload: Optional[JSON] = None, **kw: Any) -> JSON:
        return self._loop.run(self._client.apply_event(instance_id, event, payload, **kw))

    def get_history(self, id: str, **kw: Any) -> JSON:
        return self._loop.run(self._client.get_history(id, **kw))

    def batch(self, ops: Sequence[Request], *, atomic: bool = False) -> JSON:
        return self._loop.run(self._client.batch(ops, atomic=atomic))

    def replication_status(self) -> JSON:
        return self._loop.run(self._client.replication_status())

    def promote(self) -> JSON:
        return self._loop.run(self._client.promote())

    def timers_resume(self) -> JSON:
        return self._loop.run(self._client.timers_resume())

    def unwatch(self, subscription_id: Any) -> JSON:
        return self._loop.run(self._client.unwatch(subscription_id))

    def watch_all(self, **kw: Any) -> "Subscription":
        return Subscription(self._loop, self._loop.run(self._client.watch_all(**kw)))

    def watch_instance(self, instance_id: str, **kw: Any) -> "Subscription":
        return Subscription(self._loop, self._loop.run(self._client.watch_instance(instance_id, **kw)))


class Subscription:
    """An iterator of events (see the asyncio ``Subscription``)."""

    def __init__(self, loop: _Loop, sub: AsyncSubscription) -> None:
        self._loop = loop
        self._sub = sub

    @property
    def cursor(self) -> Optional[str]:
        return self._sub.cursor

    def __iter__(self) -> Iterator[JSON]:
        return self

    def __next__(self) -> JSON:
        return self._loop.run(self._sub.__anext__())

    def next(self, timeout: Optional[float] = None) -> Optional[JSON]:
        return self._loop.run(self._sub.next(timeout))

    def close(self) -> None:
        self._loop.run(self._sub.close())


def _summed(replies: Iterator[JSON], on_call: Optional[Callable[[JSON], Any]]) -> JSON:
    total: JSON = {}
    for reply in replies:
        if on_call is not None:
            on_call(reply)
        add_reply(total, reply)
    return total
