"""Mutual TLS between nodes: SSL contexts, the peer's node id, and the guard on ``/cluster/v1/``.

Both ends present their node certificate and trust only the cluster CA. The server asks
for a client certificate but does not demand it at the handshake (``CERT_OPTIONAL``), so a
box that has no certificate yet can reach the join route; every other node-to-node route
is behind :func:`require_peer_cert`, which refuses a request without a verified one. A peer
certificate from another CA fails the handshake itself.

Contexts are made once per identity and kept: when the node certificate is renewed,
:meth:`NodeIdentity.install` loads the new chain into every one of them (new handshakes use
it, connections already open finish with the old one).

Peers are named by node id, not host name: a client either checks the id after connecting
(:func:`check_peer`) or lets the handshake do it with ``client_context(identity,
verify_node_id=True)`` and ``server_hostname=<node id>`` (the id is the cert's DNS SAN).
"""

from __future__ import annotations

import logging
import ssl
from typing import Any, Callable, Iterable

from aiohttp import web

from floydd.errors import Unauthorized
from floydd.security._x509 import fingerprint_of_der, node_id_of_cert
from floydd.security.identity import NodeIdentity

__all__ = ["server_context", "api_server_context", "client_context", "peer_node_id", "peer_certificate", "check_peer",
           "require_peer_cert", "fingerprint_of_der", "time_trouble", "CLUSTER_PREFIX", "OPEN_ROUTES",
           "JOINING_ROUTES", "PEER_STANDING", "PEER_STILL_ALLOWED"]

log = logging.getLogger("floydd.security")

CLUSTER_PREFIX = "/cluster/v1/"
OPEN_ROUTES = ("/cluster/v1/join", "/cluster/v1/ca")
"""The node-to-node routes a box without a certificate may call: the CA (public) and join."""
JOINING_ROUTES = ("/cluster/v1/propose",)
"""The routes open to a certificate whose join has not completed: where it announces itself
(the handler lets it propose its own ``node.upsert`` and nothing else)."""
UNHEARD_ROUTES = (*JOINING_ROUTES, "/cluster/v1/raft", "/cluster/v1/snapshot")
"""The routes open to a certificate this box's state knows nothing of (it is behind: see
:func:`floydd.cluster.state.authz.standing`): raft, so a leader it has not heard of yet can bring it
up to date, and announcing itself."""
PEER_STANDING: web.RequestKey[str] = web.RequestKey("floydd.peer_standing", str)
"""Request key: what :func:`require_peer_cert` found the caller may do (``member``, ``joining``)."""
PEER_STILL_ALLOWED: web.RequestKey[Callable[[], bool]] = web.RequestKey("floydd.peer_still_allowed", object)
"""Asks the rule the request passed again, now: for a stream that outlives its request (the raft
stream, :mod:`floydd.cluster.net.inbound`), which asks it before each frame, so a node removed
while its stream is open is refused as a new request would be."""

_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def server_context(identity: NodeIdentity) -> ssl.SSLContext:
    """For the node-to-node listener: our chain, peers verified against the cluster CA when they send one."""
    ctx = _base(ssl.PROTOCOL_TLS_SERVER, identity)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def api_server_context(identity: NodeIdentity) -> ssl.SSLContext:
    """For the ``/v1`` API people reach over TLS (``floyd login``): our node certificate, no
    client certificate asked for (a person proves who they are with a personal token)."""
    ctx = _base(ssl.PROTOCOL_TLS_SERVER, identity)
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_context(identity: NodeIdentity, *, verify_node_id: bool = False) -> ssl.SSLContext:
    """For calls to other nodes: present our certificate, require one from the cluster CA.

    With ``verify_node_id`` the handshake also checks the peer's node id: pass the expected id
    as ``server_hostname`` (aiohttp: ``session.get(url, ssl=ctx, server_hostname=node_id)``).
    """
    ctx = _base(ssl.PROTOCOL_TLS_CLIENT, identity)
    ctx.check_hostname = verify_node_id
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def peer_node_id(obj: Any) -> str | None:
    """The node id in the peer's *verified* certificate, or None (no TLS, no cert, unverified).

    ``obj`` may be an aiohttp request, an asyncio transport or stream writer, an
    ``ssl.SSLObject``/``ssl.SSLSocket``, or an aiohttp client response whose connection is
    still held (aiohttp releases it as soon as a small body has arrived: on the client side
    prefer ``client_context(..., verify_node_id=True)``).
    """
    cert = peer_certificate(obj)
    return cert[0] if cert is not None else None


def peer_certificate(obj: Any) -> tuple[str | None, str] | None:
    """(node id, serial in lowercase hex) of the peer's *verified* certificate, or None;
    ``obj`` as for :func:`peer_node_id`. The serial is what a revocation names."""
    ssl_object = _ssl_object(obj)
    if ssl_object is None or ssl_object.context.verify_mode == ssl.CERT_NONE:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    known = _CERTS.get(der)
    if known is None:           # parsed once per certificate (it was ~15 % of a busy leader's time)
        if not ssl_object.getpeercert():  # empty unless the chain was verified
            return None
        from cryptography import x509    # here: a box alone has no peers and never loads it (issue 23)
        cert = x509.load_der_x509_certificate(der)
        known = (node_id_of_cert(cert), f"{cert.serial_number:x}")
        if len(_CERTS) >= 1024:
            _CERTS.clear()
        _CERTS[der] = known
    return known


_CERTS: dict[bytes, tuple[str | None, str]] = {}
"""Verified certificate (DER) -> its node id and serial. A certificate is only ever verified
against this node's one CA, and with verification on a handshake with a bad certificate
fails, so a DER seen verified once names the same node on any later connection."""


def check_peer(obj: Any, expected_node_id: str) -> str:
    """Raise Unauthorized unless the verified peer is ``expected_node_id``; returns it."""
    got = peer_node_id(obj)
    if got != expected_node_id:
        raise Unauthorized(f"the peer is not node {expected_node_id} (its certificate names {got or 'no node'})",
                           hint="the address may now belong to another node; refresh the member list",
                           code="wrong_peer")
    return got


def require_peer_cert(prefix: str = CLUSTER_PREFIX, exempt: Iterable[str] = OPEN_ROUTES, *,
                      is_member: Callable[[str], bool] | None = None,
                      standing: Callable[[str, str], str | None] | None = None,
                      joining: Iterable[str] = JOINING_ROUTES, unheard: Iterable[str] = UNHEARD_ROUTES):
    """aiohttp middleware: under ``prefix`` (but not ``exempt``), refuse callers without a node certificate.

    ``standing(node_id, serial)``, when given, is asked on every request what the verified
    certificate may do (:func:`floydd.cluster.state.authz.standing`): ``"member"`` calls anything,
    ``"joining"`` (a box whose join has not completed) only the ``joining`` routes, ``"unheard"``
    (a node this box's state knows nothing of yet) the ``unheard`` routes, None (a
    revoked certificate, a removed node, one that never joined and is not joining) nothing.
    The answer is left in ``request[PEER_STANDING]``, and the same rule, asked again later, in
    ``request[PEER_STILL_ALLOWED]``. ``is_member(node_id)`` is the older,
    coarser form (member or refused). Refusals are 403 with floydd's JSON error.
    """
    exempt, allowed = frozenset(exempt), {"joining": frozenset(joining), "unheard": frozenset(unheard)}

    @web.middleware
    async def peer_cert_middleware(request: web.Request, handler):
        paths = {request.path}
        resource = getattr(request.match_info.route, "resource", None)
        if resource is not None:
            paths.add(resource.canonical)
        if not any(p.startswith(prefix) for p in paths) or paths <= exempt:
            return await handler(request)
        cert = peer_certificate(request)
        node_id = cert[0] if cert is not None else None
        if node_id is None:
            log.warning("refused %s %s from %s: no valid node certificate", request.method, request.path,
                        request.remote)
            return _refuse("peer_certificate_required", "this route needs a node certificate of this cluster",
                           "only cluster nodes may call /cluster/v1/; join first with floydd join TOKEN")
        if is_member is not None and not is_member(node_id):
            log.warning("refused %s %s from node %s: not a member", request.method, request.path, node_id)
            return _refuse("not_a_member", f"node {node_id} is not a member of this cluster",
                           "the node was removed; it must join again with a new token")
        if standing is not None:
            serial = cert[1]

            def may(found: str | None) -> bool:
                # the raft stream is a GET (a WebSocket's upgrade) on the raft batches' path
                return found == "member" or (found is not None and request.method in ("POST", "GET")
                                             and paths <= allowed.get(found, frozenset()))

            found = standing(node_id, serial)
            if not may(found):
                log.warning("refused %s %s from node %s (certificate %s): %s", request.method, request.path,
                            node_id, cert[1][:16], "not a member" if found is None else "its join is not complete")
                return _refuse("not_a_member", f"node {node_id} is not a member of this cluster"
                               + ("" if found is None else " yet (its join has not completed)"),
                               "a removed node, or one whose certificate was revoked, must join again with a new "
                               "token" if found is None else "start floydd on the joined box: it completes the join")
            request[PEER_STANDING] = found
            request[PEER_STILL_ALLOWED] = lambda: may(standing(node_id, serial))
        return await handler(request)

    return peer_cert_middleware


def time_trouble(exc: BaseException) -> str | None:
    """If ``exc`` (from a TLS connection, as aiohttp or ssl raise it) failed because a
    certificate was not valid *yet or any more* by someone's clock, say so in words (the
    caller logs it at WARNING: a skewed clock looks like a broken trust otherwise); else None.
    Certificates start an hour before they are made (:data:`floydd.security.ca.CLOCK_SKEW`),
    so this means clocks more than that apart, or a certificate that was not renewed."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        code = getattr(err, "verify_code", None)    # aiohttp's subclass of it has none
        if isinstance(err, ssl.SSLCertVerificationError) and code in _TIME_CODES:
            return (f"the peer's certificate {_TIME_CODES[code]} by this box's clock: compare the boxes' "
                    "clocks (floydd members shows each box's offset from the leader's)")
        if isinstance(err, ssl.SSLError) and "CERTIFICATE_EXPIRED" in str(err).upper().replace(" ", "_"):
            return ("the peer refused this box's certificate as expired or not yet valid by its clock: compare the "
                    "boxes' clocks (floydd members shows each box's offset from the leader's)")
        todo += [err.__cause__, err.__context__, getattr(err, "certificate_error", None),
                 getattr(err, "os_error", None)]
    return None


_TIME_CODES = {9: "is not valid yet", 10: "has expired"}
"""OpenSSL's X509_V_ERR_CERT_NOT_YET_VALID and X509_V_ERR_CERT_HAS_EXPIRED."""


def _base(protocol: int, identity: NodeIdentity) -> ssl.SSLContext:
    ca_pem = identity.ca_pem.decode()  # NotFound, with a hint, on a node not yet in a cluster
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # 1.3 is negotiated whenever both ends have it
    ctx.set_ciphers(_TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.load_cert_chain(identity.cert_path, identity.key_path)
    ctx.load_verify_locations(cadata=ca_pem)
    return identity.track_context(ctx)   # a renewed certificate is loaded into it in place


def _ssl_object(obj: Any) -> ssl.SSLObject | ssl.SSLSocket | None:
    if isinstance(obj, (ssl.SSLObject, ssl.SSLSocket)):
        return obj
    transport = getattr(obj, "transport", None)  # aiohttp web.Request
    if transport is None and getattr(obj, "connection", None) is not None:  # aiohttp ClientResponse
        transport = obj.connection.transport
    if transport is None and hasattr(obj, "get_extra_info"):  # an asyncio transport
        transport = obj
    return transport.get_extra_info("ssl_object") if transport is not None else None


def _refuse(code: str, message: str, hint: str) -> web.Response:
    body = Unauthorized(message, hint=hint, code=code).to_payload()
    return web.json_response(body, status=403)
