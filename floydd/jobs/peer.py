"""``/cluster/v1/jobs/{project}/{number}/log|metrics|events``: what only the node that ran a
job has (its records and log), served to the other nodes on the mTLS app."""

from __future__ import annotations

from typing import Any, Callable

import msgpack
from aiohttp import web

from floydd.cluster.transport import MSGPACK, error_response
from floydd.errors import FloyddError, NotFound, Unavailable, UserError
from floydd.jobs.service import JobService
from floydd.model import parse_job_key

__all__ = ["peer_routes"]


def peer_routes(jobs: Callable[[], JobService | None]) -> list[web.RouteDef]:
    """``/cluster/v1/jobs/{project}/{number}/log|metrics|events``: what only the node that ran a
    job has, for the other nodes (mTLS app only). ``jobs()`` returns the daemon's job service."""

    def service(request: web.Request) -> tuple[JobService, str]:
        svc = jobs()
        if svc is None:
            raise Unavailable("this node's job service is not running yet")
        key = f"{request.match_info['project']}/{request.match_info['number']}"
        parse_job_key(key)
        return svc, key

    async def handle(request: web.Request) -> web.Response:
        try:
            svc, key = service(request)
            what = request.match_info["what"]
            if what == "log":
                raw = request.query.get("offset", "0")
                if not raw.isdigit():
                    raise UserError("offset must be a whole number")
                chunk, final = await svc.read_local_log(key, int(raw))
                return web.Response(body=chunk, headers={"X-Floydd-Final": "1" if final else "0"},
                                    content_type="application/octet-stream")
            if what == "metrics":
                payload: Any = await JobService.metrics(svc, key)
            elif what == "events":
                payload = await JobService.events(svc, key)
            else:
                raise NotFound(f"no job detail {what!r}", hint="log, metrics or events")
        except FloyddError as exc:
            return error_response(exc)
        return web.Response(body=msgpack.packb(payload, use_bin_type=True), content_type=MSGPACK)

    return [web.get("/cluster/v1/jobs/{project}/{number}/{what}", handle)]
