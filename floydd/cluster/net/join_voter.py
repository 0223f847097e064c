"""The voter's side of the join exchange: the two routes a CA-holding node serves.

``GET /cluster/v1/ca`` (:func:`ca_handler`) and ``POST /cluster/v1/join``
(:func:`join_handler`), with the tokens they check and use up (:class:`JoinTokens`). The
exchange itself, and the new box's side, are :mod:`floydd.cluster.net.join`.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import logging
import math
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from aiohttp import web
from cryptography import x509

from floydd.cluster.net import routes
from floydd.cluster.net.join import MAX_BODY
from floydd.errors import Conflict, FloyddError, InvalidSpec, Unavailable, UserError
from floydd.security._x509 import check_node_id
from floydd.security.ca import ClusterCA
from floydd.security.ratelimit import RateLimiter
from floydd.security.tokens import TokenStore

__all__ = ["JoinedNode", "JoinTokens", "StoreTokens", "ca_handler", "join_handler", "join_routes"]

log = logging.getLogger("floydd.security")


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinedNode:
    """Handed to ``on_joined`` once a node has its certificate."""
    node_id: str
    addresses: list[str]
    cert_pem: bytes
    token_id: str


class JoinTokens(Protocol):
    """Where the join handler checks and uses up tokens (:class:`StoreTokens`: a local file;
    :class:`floydd.daemon.joining.ClusterTokens`: the cluster's replicated records)."""

    checks_node_ids: bool
    """Whether :meth:`redeem` refuses a node id that already has a certificate (else the CA's
    own ledger of issued certificates is asked)."""
    validity: float | None
    """Seconds a node certificate is valid (None: the CA's default)."""

    async def check(self, token_id: str, secret: str) -> None:
        """Refuse (Unauthorized) a token that cannot be redeemed, without using it."""

    async def redeem(self, token_id: str, secret: str, *, node_id: str, serial: str, not_after: float) -> None:
        """Use the token up for ``node_id``, recording the certificate issued; exactly once."""


class StoreTokens:
    """Tokens in a local :class:`TokenStore` (one box admits joins; the join tests)."""

    checks_node_ids = False
    validity = None

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def check(self, token_id: str, secret: str) -> None:
        await asyncio.to_thread(self.store.check, token_id, secret)

    async def redeem(self, token_id: str, secret: str, *, node_id: str, serial: str, not_after: float) -> None:
        await asyncio.to_thread(self.store.redeem, token_id, secret, node_id=node_id)


CAProvider = Callable[[], "ClusterCA | None"]


def ca_handler(ca: ClusterCA | Callable[[], tuple[bytes, str, str]]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``GET /cluster/v1/ca``: the CA certificate (public), so joining boxes can check their pin.
    ``ca``: the CA, or a callable giving (CA PEM, fingerprint, cluster name) (any member has them)."""

    async def get_ca(request: web.Request) -> web.Response:
        pem, fingerprint, cluster = (ca.cert_pem, ca.fingerprint, ca.cluster_name) \
            if isinstance(ca, ClusterCA) else ca()
        return web.json_response({"ca": pem.decode(), "fingerprint": fingerprint, "cluster": cluster})

    return get_ca


def join_handler(ca: ClusterCA | CAProvider, tokens: TokenStore | JoinTokens, *,
                 store_secret_provider: Callable[[], bytes | Awaitable[bytes]],
                 on_joined: Callable[[JoinedNode], Any] | None = None,
                 peers_provider: Callable[[], list[Any] | Awaitable[list[Any]]] | None = None,
                 limiter: RateLimiter | None = None,
                 admit: Callable[[int | None], None] | None = None,
                 ) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``POST /cluster/v1/join``: vet the CSR, check the token, issue the node certificate, use
    the token up, answer.

    ``ca``: the CA, or a callable giving it where this node holds it now (None: this node may
    not admit boxes; the caller is told to join through a voter). The CSR and node id are
    checked before the token, so a malformed request does not burn it; the certificate is
    signed before the token is used up and is thrown away unless that succeeds (with
    replicated tokens, only one of two voters given the same token at once can use it up).
    ``on_joined`` (sync or async) runs after, before the answer is sent. Each address gets
    ``limiter``'s share of attempts (429 with Retry-After past it); every attempt is logged
    with its address, token id and outcome. ``admit(protocol)`` refuses a box whose release
    cannot join (the protocol it says; None from an 0.1 box), before the token is tried.
    """
    redeemer: JoinTokens = StoreTokens(tokens) if isinstance(tokens, TokenStore) else tokens
    ca_now: CAProvider = (lambda: ca) if isinstance(ca, ClusterCA) else ca

    async def post_join(request: web.Request) -> web.Response:
        remote = request.remote or "?"
        token_id, node_id = "-", "-"
        try:
            wait = limiter.take(remote) if limiter is not None else 0.0
            if wait > 0:
                log.warning("join refused: from %s: too many attempts (retry in %.0fs)", remote, wait)
                exc = Unavailable(f"too many join attempts from {remote}; try again in {wait:.0f}s",
                                  hint="check the token: each one is tried against the cluster's records",
                                  code="rate_limited")
                return web.json_response(exc.to_payload(), status=429,
                                         headers={"Retry-After": str(max(1, math.ceil(wait)))})
            body = await _request_json(request)
            node_id = check_node_id(body.get("node_id"))
            csr, token_id, secret = (body.get(k) for k in ("csr", "token_id", "secret"))
            addresses = body.get("addresses", [])
            if not isinstance(csr, str) or not isinstance(token_id, str) or not isinstance(secret, str) \
                    or not isinstance(addresses, list):
                raise InvalidSpec("a join request needs csr, token_id and secret (strings) and addresses (a list)",
                                  hint="use floydd join TOKEN ADDRESS")
            protocol = body.get("protocol")
            if admit is not None:
                admit(protocol if type(protocol) is int else None)
            authority = ca_now()
            if authority is None:
                raise Conflict("this node does not admit boxes: it is not a voter holding the cluster CA",
                               code="not_a_voter",
                               hint="join through a voter: floydd members lists them (role voter or leader)")
            await asyncio.to_thread(authority.check_request, csr, node_id, addresses,
                                    allow_reissue=redeemer.checks_node_ids)
            await redeemer.check(token_id, secret)
            cert_pem = await asyncio.to_thread(authority.issue_node_cert, csr, node_id, addresses,
                                               allow_reissue=redeemer.checks_node_ids, validity=redeemer.validity)
            cert = x509.load_pem_x509_certificate(cert_pem)
            await redeemer.redeem(token_id, secret, node_id=node_id, serial=f"{cert.serial_number:x}",
                                  not_after=cert.not_valid_after_utc.timestamp())
            store_secret = await _maybe_await(store_secret_provider())
            peers = await _maybe_await(peers_provider()) if peers_provider else []
            if on_joined is not None:
                await _maybe_await(on_joined(JoinedNode(node_id=node_id, addresses=[str(a) for a in addresses],
                                                        cert_pem=cert_pem, token_id=token_id)))
        except FloyddError as exc:
            log.warning("join refused: from %s, token %s, node %s: %s (%s)", remote, _shown(token_id),
                        _shown(node_id), exc.message, exc.code)
            return web.json_response(exc.to_payload(), status=exc.status)
        log.info("join accepted: node %s from %s with token %s (certificate serial %s)", node_id, remote,
                 token_id, f"{cert.serial_number:x}"[:16])
        return web.json_response({"cert": cert_pem.decode(), "ca": authority.cert_pem.decode(),
                                  "cluster": authority.cluster_name,
                                  "store_secret": base64.b64encode(store_secret).decode(), "peers": peers})

    return post_join


def join_routes(ca: ClusterCA, tokens: TokenStore | JoinTokens, **kwargs: Any) -> list[web.RouteDef]:
    """Both routes a CA-holding node serves to joining boxes; ``kwargs`` go to :func:`join_handler`."""
    return routes.join_routes(ca=ca_handler(ca), join=join_handler(ca, tokens, **kwargs))


def _shown(text: str) -> str:
    """An id from a request, safe to log (no secrets ever sit in these fields)."""
    return text if isinstance(text, str) and text.isalnum() and len(text) <= 16 else "?"


async def _request_json(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise UserError("the join request is too large", hint="send only the fields floydd join sends")
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise UserError("the join request is not a JSON object", hint="use floydd join TOKEN ADDRESS")
    return body


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
