"""``/v1/audit``: the cluster's audit chain as this box holds it (:mod:`floydd.cluster.state.audit`).

Every box derives the same chain from the same log, so any box answers. The listing first
catches up with the leader's commit (ReadIndex), so it shows every change committed before the
call on whichever box is asked; ``stale=1`` lists this box's copy as it is (no quorum needed).
``/v1/audit/verify`` checks this box's copy as stored in its ``raft.db`` as it is (an edit made
on disk shows here, and a box cut off from the others can still be checked); with ``head=SEQ:HASH``
(a head an auditor recorded from ``/v1/audit/head``) it also checks that the chain still holds
that entry, so a chain cut short or rewritten with its hashes recomputed is caught
(:mod:`floydd.cluster.audit_evidence`).
"""

from __future__ import annotations

from aiohttp import web

from floydd.api import keys
from floydd.api.params import query_float, query_stale
from floydd.api.request import reply
from floydd.cluster.state.audit import verify
from floydd.cluster.audit_evidence import Head, check_head, parse_head

routes = web.RouteTableDef()


async def _entries(request: web.Request, since: float | None = None, *, stale: bool = True) -> list:
    cluster = request.app[keys.CLUSTER]
    if not stale:
        await cluster.read_index()
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
    wanted = parse_head(request.query["head"]) if request.query.get("head") else None
    entries = await _entries(request)
    count, finding = verify(entries) if wanted is None else check_head(entries, wanted)
    head = entries[-1] if entries and finding is None else None
    return reply({"ok": finding is None, "entries": count if finding is None else len(entries),
                  "first_bad": None if finding is None else count, "finding": finding,
                  "head": None if head is None else head["hash"],
                  "against": None if wanted is None else wanted.text})


@routes.get("/v1/audit/head")
async def audit_head(request: web.Request) -> web.Response:
    """The chain's newest entry, to record outside the box (after catching up with the leader,
    unless ``stale=1``); ``ok`` false, with the finding, when the chain up to it is not whole."""
    entries = await _entries(request, stale=query_stale(request.query))
    count, finding = verify(entries)
    head = Head.of(entries[-1] if entries and isinstance(entries[-1], dict) else None)
    return reply({"seq": head.seq, "hash": head.hash, "index": head.index, "ts": head.ts or None,
                  "head": head.text, "entries": len(entries), "ok": finding is None, "finding": finding})
