"""The node-to-node app (``/cluster/v1``), served with mutual TLS on ``listen``.

Its routes, each with its method, path and handler, are listed in one place:
:mod:`floydd.cluster.net.routes` (:data:`~floydd.cluster.net.routes.PEER_ROUTES`); a test
checks the app serves exactly those. Here: the app, and the job details only the box that ran
a job has.

These serve boxes, never people: a job's log, metrics and events, and store objects, go to
the box a person asked, which has already asked :mod:`floydd.cluster.state.access` whether that
person may read them (:mod:`floydd.api.jobs`, :mod:`floydd.api.datasets`).
"""

from __future__ import annotations

from typing import Any, Callable

import msgpack
from aiohttp import web

from floydd.cluster.net.routes import PEER_ROUTES, job_detail_routes
from floydd.cluster.replication.peerstore import store_routes
from floydd.cluster.service import ClusterService
from floydd.cluster.net.transport import MSGPACK, error_response
from floydd.errors import FloyddError, NotFound, Unavailable, UserError
from floydd.model import JobKey
from floydd.daemon.joining import Trust
from floydd.store import Store

__all__ = ["peer_app", "PEER_ROUTES"]


def peer_app(service: ClusterService, *, store: Store, jobs: Callable[[], Any],
             trust: Trust | None = None) -> web.Application:
    """The mTLS app: raft and forwarding (``service``), store objects, the details of jobs run
    here (``jobs()``: the job service, once it runs), and joins, the CA key and renewals
    (``trust``; each route answers only where this node may: a voter holding the CA key)."""
    app = service.create_app()
    app.add_routes(store_routes(store))
    app.add_routes(job_detail_routes(_job_detail(jobs)))
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
