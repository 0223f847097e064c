"""``/v1/tokens``: personal API tokens (``floyd token``), ``/v1/whoami`` and ``/v1/ca``.

A token is made for the calling person (an admin may name another with ``person``), through
the replicated state (:mod:`floydd.cluster.state.apitokens`): any box then accepts it on its TLS
API, and a revoke refuses it on every box as soon as the box applied it. The secret is in
this answer only. From cluster level 3 the cluster also records the token's public signing
key, so a box the token is presented to may act for its person (:mod:`floydd.cluster.state.signin`).

``/v1/ca`` answers the cluster CA certificate without a token: ``floyd login`` reads it over
a first connection that sends no token, checks it signed the box's certificate, and pins it.
"""

from __future__ import annotations

import time

from aiohttp import web

from floydd.api import keys
from floydd.api.boxtrust import ca_json, wants_json
from floydd.api.params import query_stale
from floydd.api.request import acting_person as _person, api_address, body, reply
from floydd.cluster.state.apitokens import api_token_state, new_api_token
from floydd.cluster.state.authz import is_admin
from floydd.cluster.state.versions import at_least
from floydd.errors import Conflict, UserError

routes = web.RouteTableDef()

MAX_TTL = 10 * 365 * 86400.0


def _shown(record: dict, now: float) -> dict:
    return {**record, "state": api_token_state(record, now)}


@routes.post("/v1/tokens")
async def create(request: web.Request) -> web.Response:
    data = await body(request)
    me = _person(request)
    person, label, ttl = data.get("person") or me, data.get("label") or "", data.get("ttl")
    if not isinstance(person, str) or not isinstance(label, str):
        raise UserError("person and label are strings", hint="floyd token create [--label TEXT] [--ttl SECONDS]")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= MAX_TTL):
        raise UserError(f"ttl must be seconds between 1 and {MAX_TTL:g}", hint="leave --ttl out for no expiry")
    new = new_api_token()
    now = time.time()
    cmd = {"op": "apitoken.create", "id": new.token_id, "person": person, "secret_sha256": new.secret_sha256,
           "expires": now + ttl if ttl is not None else None, "label": label, "user": me}
    if at_least(request.app[keys.CLUSTER].state, 3):     # its signing key: it may back changes on any box
        cmd["public_key"] = new.public_key
    record = await request.app[keys.CLUSTER].change_account(cmd)
    return reply({**_shown(record, now), "token": new.text}, status=201)


@routes.get("/v1/tokens")
async def list_tokens(request: web.Request) -> web.Response:
    """The caller's tokens (an admin: everyone's), never their secrets; as the cluster has them,
    or with ``stale=1`` as this box holds them now."""
    me, now = _person(request), time.time()

    def shown(state) -> list:
        return [_shown(t, now) for t in state.apitokens.list(None if is_admin(state, me) else me)]
    return reply(await request.app[keys.CLUSTER].read(shown, stale=query_stale(request.query)))


@routes.delete("/v1/tokens/{token_id}")
async def revoke(request: web.Request) -> web.Response:
    cmd = {"op": "apitoken.revoke", "id": request.match_info["token_id"][:64], "user": _person(request)}
    record = await request.app[keys.CLUSTER].change_account(cmd)
    return reply(_shown(record, time.time()))


@routes.get("/v1/whoami")
async def whoami(request: web.Request) -> web.Response:
    """The person this call is made as (``floyd login`` checks its token with it), and where
    this box serves the TLS API (``api``: what to give ``floyd login``; null: nowhere)."""
    return reply({"person": _person(request), "node": request.app[keys.CLUSTER].node_id,
                  "api": api_address(request)})


@routes.get("/v1/ca")
async def ca(request: web.Request) -> web.Response:
    """The cluster CA certificate (PEM), open: what ``floyd login`` pins. Asked for JSON: the
    CA with this box's node id, the lab's members and revoked certificates, which a laptop
    keeps for the box it pins (:mod:`floydd.api.boxtrust`)."""
    identity = request.app[keys.CLUSTER].identity
    if not identity.is_member:
        raise Conflict("this box has no cluster CA", code="no_ca",
                          hint="remote access needs a cluster: run floydd init on this box (a cluster of one)")
    if wants_json(request):
        return ca_json(request)
    return web.Response(body=identity.ca_pem, content_type="application/x-pem-file")
