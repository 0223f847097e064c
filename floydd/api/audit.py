"""``/v1/audit``: the cluster's audit chain as this box holds it (:mod:`floydd.cluster.audit`).

Every box derives the same chain from the same log, so any box answers; ``/v1/audit/verify``
checks this box's copy as stored in its ``raft.db`` (an edit made on disk shows here).
"""

from __future__ import annotations

from aiohttp import web

from floydd.api import keys
from floydd.api.params import query_float
from floydd.api.request import reply
from floydd.cluster.audit import verify

routes = web.RouteTableDef()


async def _entries(request: web.Request, since: float | None = None) -> list:
    audit = request.app[keys.CLUSTER].state.audit
    if hasattr(audit, "page"):
        return await audit.page(since)
    return audit.entries(since)            # the in-memory chain (tests)


@routes.get("/v1/audit")
async def audit(request: web.Request) -> web.Response:
    """The entries in order, from ``since`` (unix seconds)."""
    since = query_float(request.query, "since", minimum=0, maximum=2**53,
                        hint="since=1700000000 (unix seconds) lists the entries made since then")
    return reply([e for e in await _entries(request, since) if isinstance(e, dict)])


@routes.get("/v1/audit/verify")
async def audit_verify(request: web.Request) -> web.Response:
    entries = await _entries(request)
    count, finding = verify(entries)
    head = entries[-1] if entries and finding is None else None
    return reply({"ok": finding is None, "entries": count if finding is None else len(entries),
                  "first_bad": None if finding is None else count, "finding": finding,
                  "head": None if head is None else head["hash"]})
