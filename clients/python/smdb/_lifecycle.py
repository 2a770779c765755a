"""MIGRATE_INSTANCES and DELETE_INSTANCES (the server's docs/lifecycle.md) on the asyncio
client: one call each, an async iterator of the calls to the end (each call examines at most
``limit`` instances and answers the ``cursor`` to go on from, ``None`` once done), and a driver
that sums them. Both ops are safe to resend: a moved instance is skipped, a deleted one is not
found again."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Dict, Optional

from . import _fanout
from ._conn import JSON

#: The counts of a reply that add up over calls (the rest is taken from the last reply).
_SUMMED = ("migrated", "deleted", "examined")
_PER_KEY = ("skipped", "would_migrate", "would_delete")


def add_reply(total: JSON, reply: JSON) -> JSON:
    """``total`` with the next call's ``reply`` added: ``migrated``/``deleted``/``examined``
    and the per-key counts summed, ``remaining`` and ``cursor`` from ``reply``."""
    for k, v in reply.items():
        if k in _SUMMED:
            total[k] = total.get(k, 0) + v
        elif k in _PER_KEY:
            into: Dict[str, int] = total.setdefault(k, {})
            for name, n in v.items():
                into[name] = into.get(name, 0) + n
        else:
            total[k] = v
    return total


def _params(**kw: Any) -> JSON:
    return {k: v for k, v in kw.items() if v is not None}


class LifecycleCalls:
    """Mixed into ``smdb.aio.Client`` (which supplies ``request``)."""

    async def request(self, op: str, params: Optional[JSON] = None, *, safe: bool) -> JSON:
        raise NotImplementedError

    async def migrate_instances(
        self,
        machine: str,
        from_version: int,
        to_version: int,
        *,
        states: Optional[Dict[str, str]] = None,
        state: Optional[str] = None,
        where: Optional[JSON] = None,
        dry_run: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> JSON:
        """One MIGRATE_INSTANCES call: ``{migrated, skipped, examined, remaining, cursor}``;
        with ``dry_run`` ``{would_migrate, skipped, examined}``. ``states`` renames states
        (old → new); ``where`` takes ``"ctx.<path>"`` conditions and/or ``"id"``."""
        p = _params(machine=machine, from_version=from_version, to_version=to_version,
                    states=states, state=state, where=where, dry_run=dry_run, limit=limit,
                    cursor=cursor)
        return await self._bulk("MIGRATE_INSTANCES", p)

    async def delete_instances(
        self,
        machine: str,
        *,
        state: Optional[str] = None,
        where: Optional[JSON] = None,
        updated_before: Optional[str] = None,
        dry_run: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> JSON:
        """One DELETE_INSTANCES call: ``{deleted, examined, remaining, cursor}``; with
        ``dry_run`` ``{would_delete, examined}``. ``updated_before`` is an RFC 3339 time."""
        p = _params(machine=machine, state=state, where=where, updated_before=updated_before,
                    dry_run=dry_run, limit=limit, cursor=cursor)
        return await self._bulk("DELETE_INSTANCES", p)

    async def _bulk(self, op: str, p: JSON) -> JSON:
        """One call of ``op``; of a cluster client, one to every group not yet done (each with
        its own cursor), the counts summed (``remaining`` too), with one combined ``cursor``
        (``None`` once every group is done; docs/cluster.md, "Clients")."""
        if getattr(self, "_cluster", None) is not None:
            return await _fanout.fan_out(self, op, p, "cursor")  # type: ignore[arg-type]
        return await self.request(op, p, safe=True)

    async def migrate_pages(self, machine: str, from_version: int, to_version: int,
                            **kw: Any) -> AsyncIterator[JSON]:
        """Every MIGRATE_INSTANCES call from ``cursor`` (or the start) to the end, as it
        comes (the last reply seen before an error holds the cursor that resumes)."""
        while True:
            reply = await self.migrate_instances(machine, from_version, to_version, **kw)
            yield reply
            if reply.get("cursor") is None:
                return
            kw["cursor"] = reply["cursor"]

    async def delete_pages(self, machine: str, **kw: Any) -> AsyncIterator[JSON]:
        """Every DELETE_INSTANCES call to the end (see ``migrate_pages``)."""
        while True:
            reply = await self.delete_instances(machine, **kw)
            yield reply
            if reply.get("cursor") is None:
                return
            kw["cursor"] = reply["cursor"]

    async def migrate_to_end(self, machine: str, from_version: int, to_version: int, *,
                             on_call: Optional[Callable[[JSON], Any]] = None, **kw: Any) -> JSON:
        """MIGRATE_INSTANCES to the end: the replies summed (``add_reply``); ``on_call`` sees
        each one as it comes."""
        total: JSON = {}
        async for reply in self.migrate_pages(machine, from_version, to_version, **kw):
            if on_call is not None:
                on_call(reply)
            add_reply(total, reply)
        return total

    async def delete_to_end(self, machine: str, *,
                            on_call: Optional[Callable[[JSON], Any]] = None, **kw: Any) -> JSON:
        """DELETE_INSTANCES to the end, summed (see ``migrate_to_end``)."""
        total: JSON = {}
        async for reply in self.delete_pages(machine, **kw):
            if on_call is not None:
                on_call(reply)
            add_reply(total, reply)
        return total
