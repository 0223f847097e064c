"""``/v1/cluster``: membership, join tokens and leaving, for the operator's ``floydd``."""

from __future__ import annotations

import asyncio

from aiohttp import web

from floydd.api import keys
from floydd.api.request import body, reply
from floydd.daemon.cluster import token_store
from floydd.errors import Conflict, UserError
from floydd.security.ca import ClusterCA

routes = web.RouteTableDef()


def _service(request: web.Request):
    service = request.app[keys.CLUSTER]
    if service is None:
        raise Conflict("this node is not part of a cluster",
                       hint="make one with `floydd init`, or join one with `floydd join TOKEN`")
    return service


@routes.get("/v1/cluster")
async def cluster(request: web.Request) -> web.Response:
    service = request.app[keys.CLUSTER]
    if service is None:
        return reply({"initialised": False, "members": []})
    status = service.status()
    return reply({"initialised": True, "node_id": service.node_id, "leader": service.leader_id,
                  "is_leader": service.is_leader, "term": getattr(status, "term", None),
                  "members": service.members()})


@routes.post("/v1/cluster/tokens")
async def create_token(request: web.Request) -> web.Response:
    """A one-time join token; only the node holding the cluster CA can make them."""
    service = _service(request)
    config = request.app[keys.CONFIG]
    ttl = (await body(request)).get("ttl", 24 * 3600)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise UserError(f"ttl {ttl!r} must be a positive number of seconds", hint="e.g. --ttl 3600")
    if not (config.state_dir / "ca" / "ca.key").exists():
        raise Conflict("this node does not hold the cluster CA", hint="make tokens on the node that ran floydd init")
    ca = await asyncio.to_thread(ClusterCA.load, config.state_dir / "ca")
    token = await asyncio.to_thread(token_store(config.state_dir, ca).create, float(ttl),
                                    address=service.transport.advertise)
    return reply({"token": token, "ttl": ttl}, status=201)


@routes.post("/v1/cluster/leave")
async def leave(request: web.Request) -> web.Response:
    """Leave the cluster for good: hand over leadership, leave raft, drop this node."""
    service = _service(request)
    await service.leave()
    return reply({"left": service.node_id})
