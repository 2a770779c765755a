"""Cluster mode's fan-out (docs/cluster.md, "Clients"), as the Rust client's ``fanout``
module: a best-effort BATCH split by group primary and its results put back in the ops'
order, and the ops that walk the instances (LIST_INSTANCES, FIND_INSTANCES, SCAN_INSTANCES,
MIGRATE_INSTANCES, DELETE_INSTANCES) over every group, their answers merged (``merge``), with
one cursor that holds every group's (``cluster:`` then the hex of the compact JSON
``{primary address: group cursor}``, keys in order: the Rust client's format, so either
client continues the other's listing)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ._cluster import SlotMap, route_key, slot_of
from .errors import ServerError, SmdbError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

JSON = Any
CURSOR_PREFIX = "cluster:"


def split_batch(map: SlotMap, ops: List[JSON]) -> List[Tuple[Optional[str], List[int]]]:
    """The ops (``{"op", "params"}``) by the primary of their slot (``None``: ops that do not
    route by instance, or whose slot has no known primary; they go to the seed), each part
    with its ops' indices in order, parts in the order of their first op."""
    parts: List[Tuple[Optional[str], List[int]]] = []
    for i, op in enumerate(ops):
        key = route_key(op.get("op", ""), op.get("params"))
        addr = map.primary_of(slot_of(key)) if key is not None else None
        for a, idx in parts:
            if a == addr:
                idx.append(i)
                break
        else:
            parts.append((addr, [i]))
    return parts


def error_entry(e: BaseException) -> JSON:
    """A batch entry for an op whose part failed as a whole."""
    if isinstance(e, ServerError):
        return {"status": "error", "error": {"code": e.code, "message": e.message,
                                             "retryable": e.retryable, "details": e.details}}
    return {"status": "error", "error": {"code": "CONNECTION_LOST", "message": str(e), "retryable": False}}


def reassemble(n: int, parts: List[Tuple[List[int], Any]]) -> JSON:
    """The whole batch's ``{"results"}`` from each part's result or exception."""
    slots: List[Optional[JSON]] = [None] * n
    for idx, r in parts:
        if isinstance(r, BaseException):
            for i in idx:
                slots[i] = error_entry(r)
            continue
        results = r.get("results") or []
        if len(results) != len(idx):
            raise SmdbError(f"BATCH answered {len(results)} entries for {len(idx)} ops")
        for i, e in zip(idx, results):
            slots[i] = e
    return {"results": [e if e is not None else error_entry(SmdbError("no answer for this op")) for e in slots]}


def encode_cursor(cursors: Dict[str, str]) -> str:
    text = json.dumps(dict(sorted(cursors.items())), separators=(",", ":"), ensure_ascii=False)
    return CURSOR_PREFIX + text.encode("utf-8").hex()


def decode_cursor(cursor: str) -> Dict[str, str]:
    bad = ValueError(f"not a cluster cursor: {cursor!r}")
    if not cursor.startswith(CURSOR_PREFIX):
        raise bad
    try:
        m = json.loads(bytes.fromhex(cursor[len(CURSOR_PREFIX):]).decode("utf-8"))
    except ValueError:
        raise bad from None
    if not isinstance(m, dict) or not all(isinstance(v, str) for v in m.values()):
        raise bad
    return m


def cursors(map: SlotMap, cursor: Optional[str]) -> Dict[str, Optional[str]]:
    """The group cursors of a call to every group: every group's primary (or a member of a
    group without one) with none for a first call, else the combined cursor's."""
    if cursor is None:
        return {a: None for a in map.group_addrs()}
    return dict(decode_cursor(cursor))


#: Counts a merge adds up over the groups (``remaining`` too: each group's estimate).
_SUMMED = ("migrated", "deleted", "examined", "remaining")
#: Per-key counts a merge adds up key by key.
_PER_KEY = ("skipped", "would_migrate", "would_delete")


def merge(parts: List[Tuple[str, JSON]], cursor_key: str = "next_cursor") -> JSON:
    """One answer of each group's (by address), as the Rust client's ``fanout::merge``:
    ``instances`` by id (each once), ``versions`` of every group (each once, in order), the
    counts summed, any other field from the first group that has it, and ``cursor_key`` one
    combined cursor of the groups with more to do (``None`` when every group is done)."""
    out: JSON = {}
    by_id: Dict[str, JSON] = {}
    nxt: Dict[str, str] = {}
    for addr, part in parts:
        for k, v in part.items():
            if k == cursor_key:
                if v is not None:
                    nxt[addr] = v
            elif k == "instances":
                for inst in v or []:
                    by_id.setdefault(inst["id"], inst)
                out.setdefault(k, [])
            elif k == "versions":
                out[k] = sorted(set(out.get(k, [])) | set(v or []))
            elif k in _SUMMED:
                out[k] = out.get(k, 0) + (v or 0)
            elif k in _PER_KEY:
                into: Dict[str, int] = out.setdefault(k, {})
                for name, n in (v or {}).items():
                    into[name] = into.get(name, 0) + n
            else:
                out.setdefault(k, v)
    if "instances" in out:
        out["instances"] = [by_id[k] for k in sorted(by_id, key=lambda s: s.encode("utf-8"))]
    out[cursor_key] = encode_cursor(nxt) if nxt else None
    return out


def merge_pages(pages: List[Tuple[str, JSON]]) -> JSON:
    """One page of the groups' LIST_INSTANCES pages (``merge``)."""
    page = merge(pages)
    page.setdefault("instances", [])
    return page


async def batch(seed: "Client", ops: List[JSON], safe: bool) -> JSON:
    """A best-effort BATCH of a cluster client: one BATCH per group primary, one after
    another, the results in the ops' order."""
    routing = seed._cluster
    assert routing is not None  # only called for cluster clients
    done: List[Tuple[List[int], Any]] = []
    for _addr, idx in split_batch(routing.map, ops):
        p = {"mode": "best_effort", "ops": [ops[i] for i in idx]}
        # Every op of a part routes to one primary: the part follows its first op's slot,
        # with the routing's retries (an op whose slot moved meanwhile gets its own MOVED).
        key = route_key(ops[idx[0]]["op"], ops[idx[0]].get("params"))
        try:
            if key is None:
                done.append((idx, await seed._direct("BATCH", p, safe=safe)))
            else:
                done.append((idx, await routing.run(seed, key, "BATCH", p, safe)))
        except (SmdbError, OSError) as e:
            done.append((idx, e))
    return reassemble(len(ops), done)


async def fan_out(seed: "Client", op: str, params: JSON, cursor_key: str = "next_cursor") -> JSON:
    """``op`` of a cluster client to every group (LIST, FIND and SCAN_INSTANCES, MIGRATE and
    DELETE_INSTANCES): to every group's primary with its own cursor (a first call: every
    group, no cursor; else the groups the combined ``cursor`` names), each with the routing's
    retries, the answers merged (``merge``) with one combined cursor under ``cursor_key``."""
    routing = seed._cluster
    assert routing is not None  # only called for cluster clients
    cs = cursors(routing.map, params.get("cursor"))
    if not cs and params.get("cursor") is None:
        return await seed._direct(op, params, safe=True)
    parts = []
    for addr, c in sorted(cs.items()):
        p = {k: v for k, v in params.items() if k != "cursor"}
        if c is not None:
            p["cursor"] = c
        parts.append(await routing.run_group(seed, addr, op, p, True))
    return merge(parts, cursor_key)


async def list_instances(seed: "Client", params: JSON) -> JSON:
    """LIST_INSTANCES of a cluster client: a page from every group primary (or those the
    cursor names), merged by id, with one combined cursor."""
    page = await fan_out(seed, "LIST_INSTANCES", params)
    page.setdefault("instances", [])
    return page
