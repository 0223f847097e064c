"""``/v1/audit``: the cluster's audit chain as this box holds it (:mod:`floydd.cluster.audit`).

Every box derives the same chain from the same log, so any box answers. The listing first
catches up with the leader's commit (ReadIndex), so it shows every change committed before the
call on whichever box is asked; ``stale=1`` lists this box's copy as it is (no quorum needed).
``/v1/audit/verify`` checks this box's copy as stored in its ``raft.db`` as it is (an edit made
on disk shows here, and a box cut off from the others can still be checked).
"""

from __future__ import annotations

from aiohttp import web

from floydd.api import keys
from floydd.api.params import query_float, query_stale
from floydd.api.request import reply
from floydd.cluster.audit import verify

routes = web.RouteTableDef()


async def _entries(request: web.Request, since: float | None = None, *, stale: bool = True) -> list:
    cluster = request.app[keys.CLUSTER]
    if not stale:
        await cluster.driver.read_index()
    return await cluster.state.audit.page(since)


@routes.get("/v1/audit")
async def audit(request: web.Request) -> web.Response:
    """The entries in order, from ``since`` (unix seconds)."""
    since = query_float(request.query, "since", minimum=0, maximum=2**53,
                        hint="since=1700000000 (unix seconds) lists the entries made since then")
    entries = await _entries(request, since, stale=query_stale(request.query))
    return reply([e for e in entries if isinstance(e, dict)])


@routes.get("/v1/audit/verify")
async def audit_verify(request: web.Request) -> web.Response:
    entries = await _entries(request)
    count, finding = verify(entries)
    head = entries[-1] if entries and finding is None else None
    return reply({"ok": finding is None, "entries": count if finding is None else len(entries),
                  "first_bad": None if finding is None else count, "finding": finding,
                  "head": None if head is None else head["hash"]})
