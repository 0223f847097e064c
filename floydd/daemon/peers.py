"""The node-to-node API (``/cluster/v1``), all in one place: served with mutual TLS on ``listen``.

Every route but the two a joining box calls needs a node certificate of this cluster whose
node has not been removed (:func:`~floydd.security.tls.require_peer_cert`). :data:`PEER_ROUTES`
lists them; a test checks the app serves exactly these::

    POST /cluster/v1/raft                          raft messages, in batches (the transport)
    POST /cluster/v1/propose                       a command forwarded to the leader
    POST /cluster/v1/read                          a linearizable read forwarded to the leader
    POST /cluster/v1/snapshot                      the leader's snapshot, streamed in frames
    GET  /cluster/v1/store/objects/{hex}           a sealed object of this node's store
    GET  /cluster/v1/jobs/{project}/{number}/log   a job's log from an offset, run here
    GET  /cluster/v1/jobs/{project}/{number}/metrics|events   its series and events
    GET  /cluster/v1/ca                            the CA certificate (public: joining boxes)
    POST /cluster/v1/join                          a join with a token (voters holding the CA key)
    POST /cluster/v1/ca/key                        the CA key, to a current voter only
    POST /cluster/v1/certs/renew                   a member's renewed certificate (voters)
    POST /cluster/v1/store/epoch-key               a store key epoch's secret, to a member

(the last five: :mod:`floydd.daemon.joining`)

These serve boxes, never people: a job's log, metrics and events, and store objects, go to
the box a person asked, which has already asked :mod:`floydd.cluster.state.access` whether that
person may read them (:mod:`floydd.api.jobs`, :mod:`floydd.api.datasets`).
"""

from __future__ import annotations

from typing import Any, Callable

import msgpack
from aiohttp import web

from floydd.cluster.replication.peerstore import store_routes
from floydd.cluster.service import ClusterService
from floydd.cluster.net.transport import MSGPACK, error_response
from floydd.errors import FloyddError, NotFound, Unavailable, UserError
from floydd.model import JobKey
from floydd.daemon.joining import TRUST_ROUTES, Trust
from floydd.store import Store

__all__ = ["peer_app", "PEER_ROUTES"]

PEER_ROUTES = frozenset({
    ("POST", "/cluster/v1/raft"), ("POST", "/cluster/v1/propose"), ("POST", "/cluster/v1/read"),
    ("POST", "/cluster/v1/snapshot"),
    ("GET", "/cluster/v1/store/objects/{hex}"), ("GET", "/cluster/v1/jobs/{project}/{number}/{what}"),
}) | TRUST_ROUTES
"""(method, path) of every node-to-node route."""


def peer_app(service: ClusterService, *, store: Store, jobs: Callable[[], Any],
             trust: Trust | None = None) -> web.Application:
    """The mTLS app: raft and forwarding (``service``), store objects, the details of jobs run
    here (``jobs()``: the job service, once it runs), and joins, the CA key and renewals
    (``trust``; each route answers only where this node may: a voter holding the CA key)."""
    app = service.create_app()
    app.add_routes(store_routes(store))
    app.add_routes([web.get("/cluster/v1/jobs/{project}/{number}/{what}", _job_detail(jobs))])
    if trust is not None:
        app.add_routes(trust.routes())
    return app


def _job_detail(jobs: Callable[[], Any]):
    """What only the node that ran a job has (its log, metric series and events)."""

    async def handle(request: web.Request) -> web.Response:
        try:
            service = jobs()
            if service is None:
                raise Unavailable("this node's job service is not running yet")
            key = JobKey.parse(f"{request.match_info['project']}/{request.match_info['number']}")
            what = request.match_info["what"]
            if what == "log":
                raw = request.query.get("offset", "0")
                attempt = request.query.get("attempt")     # an earlier attempt's (issue 21); absent: the latest
                if not raw.isascii() or not raw.isdigit() or not (attempt is None or attempt.isascii()
                                                                   and attempt.isdigit() and len(attempt) < 10):
                    raise UserError("offset and attempt must be whole numbers")
                chunk, final = await service.local.read_log(key, int(raw), None if attempt is None else int(attempt))
                return web.Response(body=chunk, headers={"X-Floydd-Final": "1" if final else "0"},
                                    content_type="application/octet-stream")
            if what == "metrics":
                payload: Any = await service.local.metrics(key)
            elif what == "events":
                payload = await service.local.events(key)
            else:
                raise NotFound(f"no job detail {what!r}", hint="log, metrics or events")
        except FloyddError as exc:
            return error_response(exc)
        return web.Response(body=msgpack.packb(payload, use_bin_type=True), content_type=MSGPACK)

    return handle
