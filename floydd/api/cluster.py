"""``/v1/cluster``: membership, join tokens and leaving, for the operator's ``floydd``."""

from __future__ import annotations

from aiohttp import web

from floydd.api import keys
from floydd.api.request import body, reply
from floydd.errors import Conflict, UserError

routes = web.RouteTableDef()

MAX_TTL = 365 * 24 * 3600.0
"""The longest a join token may stay valid (seconds)."""


@routes.get("/v1/cluster")
async def cluster(request: web.Request) -> web.Response:
    """``initialised``: whether the node talks to other boxes (``floydd init`` or ``join``); a
    box alone is still a cluster of one, its only voter."""
    service = request.app[keys.CLUSTER]
    status = service.status()
    return reply({"initialised": bool(service.transport.advertise), "node_id": service.node_id,
                  "leader": service.leader_id, "is_leader": service.is_leader, "term": status.term,
                  "members": service.members()})


@routes.post("/v1/cluster/tokens")
async def create_token(request: web.Request) -> web.Response:
    """A one-time join token; only the node holding the cluster CA can make them."""
    ttl = (await body(request)).get("ttl", 24 * 3600)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= MAX_TTL:
        raise UserError(f"ttl {str(ttl)[:40]} must be a number of seconds above 0, at most {MAX_TTL:.0f} (a year)",
                        hint="e.g. --ttl 3600")
    tokens = request.app[keys.TOKENS]
    if tokens is None:
        if not request.app[keys.CLUSTER].transport.advertise:
            raise Conflict("this box is not set up for other boxes to join yet",
                           hint="stop the daemon (floydd stop), run floydd init, start it again, then make a token")
        raise Conflict("this node does not hold the cluster CA", hint="make tokens on the node that ran floydd init")
    return reply({"token": await tokens.create(float(ttl)), "ttl": ttl}, status=201)


@routes.post("/v1/cluster/leave")
async def leave(request: web.Request) -> web.Response:
    """Leave the cluster for good: hand over leadership, leave raft, drop this node."""
    service = request.app[keys.CLUSTER]
    if not service.transport.advertise:
        raise Conflict("this box is not part of a cluster with other boxes", hint="nothing to leave")
    await service.leave()
    return reply({"left": service.node_id})
