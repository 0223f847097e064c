"""What goes over the node-to-node wire besides raft messages: its routes, its content type,
its error answers, and the protocol check every request passes (:func:`protocol_middleware`).

An error answers ``{"error": {...floydd error payload}, "leader": id | None, "by"}`` with the
error's HTTP status (:func:`fail`); the caller turns it back into its FloyddError
(:func:`error_from`). Shared by the transport's parts (:mod:`floydd.cluster.net.transport`,
:mod:`~floydd.cluster.net.inbound`, :mod:`~floydd.cluster.net.snapshot_stream`).
"""

from __future__ import annotations

from typing import Any

import msgpack
from aiohttp import web

from floydd import log
from floydd.cluster.raft import ProposalDropped
from floydd.cluster.state import versions
from floydd.cluster.net.routes import PROPOSE_PATH, RAFT_PATH, READ_PATH, SNAPSHOT_PATH
from floydd.errors import Conflict, FloyddError, InternalError, NotFound, Unauthorized, Unavailable, UserError, \
    from_payload

__all__ = ["RAFT_PATH", "PROPOSE_PATH", "READ_PATH", "SNAPSHOT_PATH", "MSGPACK", "protocol_middleware",
           "error_response", "fail", "error_from", "BY_STATUS", "timeout_of"]

MSGPACK = "application/msgpack"


@web.middleware
async def protocol_middleware(request: web.Request, handler):
    """Node-to-node requests say the sender's protocol (:data:`floydd.cluster.state.versions.HEADER`;
    none: an 0.1 box); only adjacent releases are answered, and every answer says ours."""
    theirs = request.headers.get(versions.HEADER)
    if not versions.peer_supported(theirs):
        log.cluster.warning("refused %s %s from %s: protocol %s is not adjacent to ours (%d)", request.method,
                     request.path, request.remote, theirs, versions.PROTOCOL)
        response = fail(Conflict(f"this box speaks cluster protocol {versions.PROTOCOL}, yours {theirs}: "
                                 "releases more than one apart do not work together", code="protocol_too_far",
                                 hint="upgrade boxes one release at a time (docs/operations.md, \"Upgrades\")"), 409)
    else:
        response = await handler(request)
    if not response.prepared:           # a streamed answer has sent its headers already
        response.headers[versions.HEADER] = str(versions.PROTOCOL)
    return response


def error_response(exc: FloyddError) -> web.Response:
    """An error answer of a ``/cluster/v1`` route, as :meth:`Transport.fetch` reads it."""
    return fail(exc, exc.status)


def fail(exc: FloyddError, status: int, **extra: Any) -> web.Response:
    body = {**exc.to_payload(), **extra}
    return web.Response(status=status, body=msgpack.packb(body, use_bin_type=True), content_type=MSGPACK)


BY_STATUS = {400: UserError, 403: Unauthorized, 404: NotFound, 409: Conflict, 503: Unavailable}


def error_from(payload: dict, status: int) -> FloyddError:
    err = payload.get("error") if isinstance(payload.get("error"), dict) else {}
    kind = str(err.get("kind", ""))
    message, hint = str(err.get("message", f"HTTP {status}")), str(err.get("hint", ""))
    if kind in ("ProposalDropped", "ConfChangeRejected"):
        exc: FloyddError = ProposalDropped(message, leader=payload.get("leader"), hint=hint)
        exc.code = err.get("code") or exc.code
        return exc
    exc = from_payload(payload, status)
    if type(exc) is FloyddError:
        cls = BY_STATUS.get(status, InternalError)
        exc = cls(message, hint=hint, code=err.get("code"))
    return exc


def timeout_of(value: object) -> float:
    """A request's ``timeout``: seconds, (0, 300]; 10 when missing or out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 300:
        return 10.0
    return float(value)
