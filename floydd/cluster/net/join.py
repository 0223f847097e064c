"""The join exchange: a new box trades a one-time token and a CSR for its node certificate.

    new box                                           a voter (each holds the CA key)
    ───────                                           ───────────────────
 1. TLS, no verification ── GET /cluster/v1/ca ─────► {"ca", "fingerprint", "cluster"}
    check sha256(CA) == the token's fingerprint and that the server's own certificate
    was issued by that CA; otherwise stop, having sent nothing but the GET
 2. TLS trusting only that CA ── POST /cluster/v1/join {token_id, secret, csr, node_id, addresses}
                                                     ► vet CSR, check token, issue cert,
                                                       use the token up (through raft)
                                ◄── {"cert", "ca", "cluster", "store_secret" (base64), "peers"}

Step 2 opens a new connection that verifies the server against the pinned CA (rather than
reusing step 1's unverified one), so a man in the middle cannot swap in after the check.
The store secret travels only over that channel; the caller writes it 0600.

Any voter admits boxes: every voter holds the CA key (:mod:`floydd.daemon.joining` says why
and how it gets there) and the tokens are replicated records, used up through raft, so a
join works through whichever voter is up (give its address: ``floydd join TOKEN HOST:PORT``)
and two voters cannot both accept one token. Attempts are rate-limited per source address
and each one is logged (address, token id, node id, accepted or why refused).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import logging
import math
import ssl
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Protocol

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from floydd.cluster.net import routes
from floydd.cluster.net.routes import CA_PATH, JOIN_PATH
from floydd.cluster.state.versions import HEADER, PROTOCOL
from floydd.unreachable import cannot_reach
from floydd.errors import (Conflict, FloyddError, InvalidSpec, NotFound, Unauthorized, Unavailable, UserError,
                           from_payload)
from floydd.security._x509 import check_node_id, fingerprint_of_der, node_id_of_cert
from floydd.security.ca import ClusterCA
from floydd.security.identity import make_csr
from floydd.security.ratelimit import RateLimiter
from floydd.security.tokens import TokenStore, parse_token

__all__ = ["JoinResult", "JoinedNode", "JoinTokens", "StoreTokens", "join", "fetch_pinned_ca", "join_handler",
           "ca_handler", "join_routes", "JOIN_PATH", "CA_PATH"]

log = logging.getLogger("floydd.security")

_MAX_BODY = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinResult:
    """What a successful join brings back; the store secret never shows in the repr."""
    node_id: str
    cert_pem: bytes
    ca_pem: bytes
    ca_fingerprint: str
    cluster: str
    store_secret: bytes = field(repr=False)
    peers: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinedNode:
    """Handed to ``on_joined`` once a node has its certificate."""
    node_id: str
    addresses: list[str]
    cert_pem: bytes
    token_id: str


# ---------------------------------------------------------------- client


async def join(token: str, address: str | None, node_id: str, key: Any, *, addresses: Iterable[str] = (),
               timeout: float = 15.0) -> JoinResult:
    """Join the cluster at ``address`` (else the token's address hint) with ``token`` and ``key``."""
    parsed = parse_token(token)
    address = address or parsed.address
    if not address:
        raise InvalidSpec("no address to join: the token has no address hint",
                          hint="give the address of a cluster node: floydd join TOKEN HOST:PORT")
    check_node_id(node_id)
    csr = make_csr(key, node_id)  # made before any network traffic: a bad key fails here
    base = _base_url(address)
    ca_pem = await fetch_pinned_ca(address, parsed.ca_fingerprint, timeout=timeout)
    body = {"token_id": parsed.token_id, "secret": parsed.secret, "csr": csr.decode(), "node_id": node_id,
            "addresses": list(addresses), "protocol": PROTOCOL}      # an 0.1 voter ignores it
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout),
                                     headers={HEADER: str(PROTOCOL)}) as session:   # else taken for 0.1's
        try:
            async with session.post(base + JOIN_PATH, json=body, ssl=_pinned_context(ca_pem)) as resp:
                payload = await _read_json(resp)
                status = resp.status
        except aiohttp.ClientSSLError as exc:
            raise _mismatch(address) from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _unreachable(address, exc) from exc
    if status != 200:
        raise from_payload(payload, status)
    result = _check_answer(payload, ca_pem, parsed.ca_fingerprint, node_id, key)
    log.info("node %s joined cluster %s via %s", node_id, result.cluster, address)
    return result


async def fetch_pinned_ca(address: str, fingerprint: str, *, timeout: float = 15.0) -> bytes:
    """Fetch the CA from ``address`` over unverified TLS and return it only if it is the pinned one.

    Sends nothing but ``GET /cluster/v1/ca``. Refuses (Unauthorized, ``ca_fingerprint_mismatch``)
    when the CA's sha256 differs from ``fingerprint`` or the server's own certificate on that
    same connection was not issued by that CA. Plain asyncio streams rather than aiohttp, so the
    server's certificate is read off the very connection the CA came over.
    """
    host, port = _host_port(address)
    try:
        status, body, leaf_der = await asyncio.wait_for(_get_unverified(host, port, CA_PATH), timeout)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        raise _unreachable(address, exc) from exc
    if status == 404:
        raise NotFound(f"the node at {address} does not take joins",
                       hint="join through a voter of the cluster (floydd members lists them)")
    if status != 200:
        raise Unavailable(f"the node at {address} answered HTTP {status} when asked for its CA",
                          hint="check its log, then try again")
    try:
        payload = json.loads(body)
        ca = x509.load_pem_x509_certificate(payload["ca"].encode())
        x509.load_der_x509_certificate(leaf_der).verify_directly_issued_by(ca)
    except (ValueError, TypeError, KeyError, AttributeError, InvalidSignature):
        raise _mismatch(address) from None
    if fingerprint_of_der(ca.public_bytes(serialization.Encoding.DER)) != fingerprint:
        raise _mismatch(address)
    return ca.public_bytes(serialization.Encoding.PEM)


# ---------------------------------------------------------------- server


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


# ---------------------------------------------------------------- helpers


def _check_answer(payload: Any, ca_pem: bytes, fingerprint: str, node_id: str, key: Any) -> JoinResult:
    bad = Unavailable("the cluster answered the join with something unexpected",
                      hint="check both nodes run the same floydd version, then try with a new token")
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), str)
                                                for k in ("cert", "ca", "cluster", "store_secret")):
        raise bad
    try:
        cert = x509.load_pem_x509_certificate(payload["cert"].encode())
        ca = x509.load_pem_x509_certificate(payload["ca"].encode())
        if fingerprint_of_der(ca.public_bytes(serialization.Encoding.DER)) != fingerprint:
            raise bad
        cert.verify_directly_issued_by(ca)
        store_secret = base64.b64decode(payload["store_secret"], validate=True)
    except (ValueError, TypeError, InvalidSignature):
        raise bad from None
    if cert.public_key() != key.public_key() or node_id_of_cert(cert) != node_id:
        raise bad
    peers = payload.get("peers")
    return JoinResult(node_id=node_id, cert_pem=cert.public_bytes(serialization.Encoding.PEM), ca_pem=ca_pem,
                      ca_fingerprint=fingerprint, cluster=payload["cluster"], store_secret=store_secret,
                      peers=tuple(peers) if isinstance(peers, list) else ())


def _host_port(address: str) -> tuple[str, int]:
    address = address.strip()
    if address.startswith("http://"):
        raise InvalidSpec("joining needs TLS; the address must not be http://", hint="give HOST:PORT")
    host_port = address.removeprefix("https://").rstrip("/")
    host, sep, port = host_port.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host_port \
            or any(c.isspace() for c in host_port):
        raise InvalidSpec(f"address {address[:80]!r} is not HOST:PORT",
                          hint="give a cluster node's address, e.g. 192.168.1.20:7443 or [fe80::1]:7443")
    return host, int(port)


def _base_url(address: str) -> str:
    host, port = _host_port(address)
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


async def _get_unverified(host: str, port: int, path: str) -> tuple[int, bytes, bytes | None]:
    """One HTTP/1.1 GET over TLS without verification: (status, body, the server's DER certificate)."""
    reader, writer = await asyncio.open_connection(host, port, ssl=_unverified_context())
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        leaf_der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n{HEADER}: {PROTOCOL}\r\n"
                     "Connection: close\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        length = int(headers.get("content-length", "-1"))
        if not 0 <= length <= _MAX_BODY:
            raise ValueError("the answer has no usable Content-Length")
        body = await reader.readexactly(length)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    return status, body, leaf_der


def _unverified_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only to read the CA; nothing secret goes over this connection
    return ctx


def _pinned_context(ca_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # the server is known by the CA, not by a host name
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.load_verify_locations(cadata=ca_pem.decode())
    return ctx


async def _read_json(resp: aiohttp.ClientResponse) -> Any:
    data = await resp.content.read(_MAX_BODY + 1)
    while len(data) <= _MAX_BODY and (more := await resp.content.read(_MAX_BODY + 1 - len(data))):
        data += more
    if len(data) > _MAX_BODY:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


async def _request_json(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > _MAX_BODY:
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


def _mismatch(address: str) -> Unauthorized:
    return Unauthorized(f"the server at {address} is not the cluster your token is for (CA fingerprint mismatch)",
                        code="ca_fingerprint_mismatch",
                        hint="check the address; make the token on a node of the cluster you want to join. "
                             "If both are right, something may be intercepting the connection")


def _unreachable(address: str, exc: BaseException) -> Unavailable:
    return Unavailable(cannot_reach("a floydd node", address, exc),
                       hint="check the address and port, and that floydd runs there with a cluster initialised")
