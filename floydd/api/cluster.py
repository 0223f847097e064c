"""``/v1/cluster``: membership, join tokens and leaving, for the operator's ``floydd``."""

from __future__ import annotations

import time

from aiohttp import web

from floydd.api import keys
from floydd.api.request import acting_user, api_address, body, reply
from floydd.cluster.state.credentials import MAX_TTL_S, token_state
from floydd.cluster.state.authz import is_admin
from floydd.cluster.state.versions import at_least
from floydd.errors import Conflict, FloyddError, Forbidden, UserError

routes = web.RouteTableDef()

MAX_TTL = MAX_TTL_S
"""The longest a join token may stay valid (seconds): 30 days."""


@routes.get("/v1/cluster")
async def cluster(request: web.Request) -> web.Response:
    """``initialised``: whether the node talks to other boxes (``floydd init`` or ``join``); a
    box alone is still a cluster of one, its only voter."""
    service = request.app[keys.CLUSTER]
    status = service.status()
    member = service.identity.is_member
    return reply({"initialised": bool(service.advertise), "node_id": service.node_id,
                  "leader": service.leader_id, "is_leader": service.is_leader, "term": status.term,
                  "members": service.members(),
                  "ca_fingerprint": service.identity.cluster_fingerprint if member else None,
                  "api": api_address(request), "protocol": service.state.protocol})


@routes.post("/v1/cluster/tokens")
async def create_token(request: web.Request) -> web.Response:
    """A one-time join token, made on any voter (a replicated record: any voter redeems it).
    ``sign_in``: the people signed in on the box it admits (left out: its maker; ``[]``: nobody)."""
    data = await body(request)
    ttl = data.get("ttl", 24 * 3600)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= MAX_TTL:
        raise UserError(f"ttl {str(ttl)[:40]} must be a number of seconds above 0, at most {MAX_TTL:.0f} (30 days)",
                        hint="e.g. --ttl 3600")
    sign_in = data.get("sign_in")
    if sign_in is not None and (not isinstance(sign_in, list) or not all(isinstance(n, str) for n in sign_in)):
        raise UserError("sign_in is a list of people's names", hint="floydd token create --sign-in NAME (or none)")
    tokens = _tokens(request)
    token = await tokens.create(float(ttl), made_by=acting_user(request), sign_in=sign_in)
    return reply({"token": token, "ttl": ttl}, status=201)


@routes.get("/v1/cluster/tokens")
async def list_tokens(request: web.Request) -> web.Response:
    """Every join token the cluster keeps (a spent one for a week), with its state."""
    now = time.time()
    return reply([{**t, "state": token_state(t, now)} for t in await _tokens(request).list()])


@routes.delete("/v1/cluster/tokens/{token_id}")
async def revoke_token(request: web.Request) -> web.Response:
    """Revoke a join token: no voter accepts it afterwards. One already used by a box that is not
    a member yet cancels that join (``cancelled_join``: the box, refused for good)."""
    record = await _tokens(request).revoke(request.match_info["token_id"], by=acting_user(request))
    return reply({**record, "state": token_state(record, time.time())})


def _tokens(request: web.Request):
    tokens = request.app[keys.TOKENS]
    if tokens is None:
        raise Conflict("this box is not set up for other boxes to join yet",
                       hint="stop the daemon (floydd stop), run floydd init, start it again, then make a token")
    return tokens


@routes.post("/v1/cluster/remove")
async def remove(request: web.Request) -> web.Response:
    """``floydd remove NODE``: take a node out of raft, tombstone it, revoke its certificates;
    an admin's command (checked by every box: :mod:`floydd.cluster.state.authz`)."""
    node = (await body(request)).get("node")
    if not isinstance(node, str) or not node:
        raise UserError("node must be a node id or name", hint="floydd members lists the boxes")
    service = request.app[keys.CLUSTER]
    node = _node_named(service.state, node)
    joining = node not in service.state.nodes and node in service.state.trust.certs
    await service.remove_node(node, user=acting_user(request))
    return reply({"removed": node, **({"cancelled_join": node} if joining else {}),
                  **await _rotate_after_removal(request, node)})


async def _rotate_after_removal(request: web.Request, node: str) -> dict:
    """A removed box keeps the store keys it had: start a new epoch it never receives (level 3).
    The removal stands whatever happens here; a failed rotation is said, with what to do."""
    epochs = request.app.get(keys.EPOCHS)
    if epochs is None or not at_least(request.app[keys.CLUSTER].state, 3):
        return {}
    try:
        rec = await epochs.rotate(user=acting_user(request), reason=f"remove {node}")
    except FloyddError as exc:
        return {"store_key": f"not rotated: {exc.message}; run floydd rotate-store-key"}
    return {"store_epoch": rec["epoch"]}


@routes.post("/v1/cluster/store-key")
async def rotate_store_key(request: web.Request) -> web.Response:
    """``floydd rotate-store-key``: a new store key epoch, made on this box (an admin's): new
    data is sealed under it, older data is re-sealed under it in the background on every box."""
    who = acting_user(request)
    if not is_admin(request.app[keys.CLUSTER].state, who):
        raise Forbidden(f"user {who} may not rotate the store key: not an admin", code="not_an_admin",
                        hint="an admin runs floydd rotate-store-key (floydd user list shows the admins)")
    epochs = request.app[keys.EPOCHS]
    rec = await epochs.rotate(user=acting_user(request), reason="rotate")
    return reply({**rec, "here": epochs.report()}, status=201)


@routes.get("/v1/cluster/store-key")
async def store_key(request: web.Request) -> web.Response:
    """The cluster's store key epochs and where this box's re-seal stands."""
    return reply(request.app[keys.EPOCHS].report())


def _node_named(state, text: str) -> str:
    """A node id, or the id of the one box of that name (a join not started has no name yet)."""
    if text in state.nodes or text in state.trust.certs or text in state.removed:
        return text
    named = sorted(nid for nid, n in state.nodes.items() if n.get("name") == text)
    if len(named) > 1:
        raise UserError(f"{len(named)} boxes are named {text}: give its id", hint="floydd members lists the ids")
    return named[0] if named else text


@routes.post("/v1/cluster/drain")
async def drain(request: web.Request) -> web.Response:
    """``floydd drain``: no new placements on this box (``drain`` false: again) until the daemon
    restarts; the jobs running here carry on. An admin's: it changes where the lab's jobs go."""
    on = (await body(request)).get("drain", True)
    if not isinstance(on, bool):
        raise UserError("drain is true or false", hint="floydd drain, or floydd drain --off")
    service = request.app[keys.CLUSTER]
    _admin_only(request, "drain" if on else "undrain")
    service.draining = on
    service.beat_soon()                 # the leader hears it now, not at the next heartbeat
    running = sorted(str(k) for k in request.app[keys.JOBS].runtime.running())
    return reply({"node": service.node_id, "name": service.name, "draining": on, "running": running})


def _admin_only(request: web.Request, verb: str) -> None:
    """What changes a box itself (drain, leave) is an admin's, where the lab has people."""
    who = acting_user(request)
    if not is_admin(request.app[keys.CLUSTER].state, who):
        raise Forbidden(f"user {who} may not {verb} this box: not an admin", code="not_an_admin",
                        hint="an admin does it (floydd user list shows the admins)")


@routes.post("/v1/cluster/leave")
async def leave(request: web.Request) -> web.Response:
    """Leave the cluster for good: hand over leadership, leave raft, drop this node (an admin's)."""
    service = request.app[keys.CLUSTER]
    _admin_only(request, "take out of the cluster")
    if not service.advertise:
        raise Conflict("this box is not part of a cluster with other boxes", hint="nothing to leave")
    await service.leave()
    return reply({"left": service.node_id})
