"""What a box tells laptops of the lab, for the box they pinned (:mod:`floydd.security.boxpin`).

A laptop refuses, before sending its token, a server whose certificate is not the pinned
box's or is revoked; to know the revocations it asks the box: ``GET /v1/ca`` with ``Accept:
application/json`` answers, besides the CA, this box's node id, the current members (node id
-> name) and the revoked certificate serials (a removed box's, with its node id), with their
digest (:func:`~floydd.security.boxpin.digest_of`). Every authenticated answer of the TLS API
carries that digest in the ``Floydd-Trust`` header (:func:`trust_header`), so a laptop asks
again exactly when something changed. Nothing here is secret: the member list is what
discovery announces on the LAN, and a serial is no key.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from floydd.api import keys
from floydd.api.request import PERSON
from floydd.security.boxpin import TRUST_HEADER, digest_of

__all__ = ["lab_view", "ca_json", "wants_json", "trust_header"]


def lab_view(state: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(members: node id -> name, revoked: serial -> node id) from the replicated state."""
    members = {nid: str(node.get("name") or nid) for nid, node in state.nodes.items()}
    revoked = {serial: str(record.get("node") or "") for serial, record in state.revoked.items()}
    return members, revoked


def wants_json(request: web.Request) -> bool:
    """Whether ``/v1/ca`` was asked for JSON (a laptop of this release) rather than the PEM alone."""
    return "application/json" in request.headers.get("Accept", "")


def ca_json(request: web.Request) -> web.Response:
    """``/v1/ca``'s JSON answer (module docstring)."""
    service = request.app[keys.CLUSTER]
    identity = service.identity
    members, revoked = lab_view(service.state)
    return web.json_response({
        "ca": identity.ca_pem.decode(), "fingerprint": identity.cluster_fingerprint, "node": service.node_id,
        "members": [{"id": nid, "name": name} for nid, name in sorted(members.items())],
        "revoked": [{"serial": serial, "node": nid} for serial, nid in sorted(revoked.items())],
        "trust": digest_of(members, revoked)})


async def trust_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the digest of the lab's lists on every answer to a person
    authenticated on the TLS API (headers go out before a streamed body, so streams have it)."""
    if request.get(PERSON) is None:
        return
    service = request.app.get(keys.CLUSTER)
    if service is None:
        return
    response.headers[TRUST_HEADER] = digest_of(*lab_view(service.state))
