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
and each one is logged (address, token id, node id, accepted or why refused). The voter's
side, its two routes, is :mod:`floydd.cluster.net.join_voter`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any, Iterable

import aiohttp
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from floydd.cluster.net.routes import CA_PATH, JOIN_PATH
from floydd.cluster.state.versions import HEADER, PROTOCOL
from floydd.unreachable import cannot_reach
from floydd.errors import InvalidSpec, NotFound, Unauthorized, Unavailable, from_payload
from floydd.security._x509 import check_node_id, fingerprint_of_der, node_id_of_cert
from floydd.security.identity import make_csr
from floydd.security.tokens import parse_token

__all__ = ["JoinResult", "join", "fetch_pinned_ca", "JOIN_PATH", "CA_PATH"]

log = logging.getLogger("floydd.security")

MAX_BODY = 64 * 1024
"""Bytes a join request or answer may hold."""


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
        if not 0 <= length <= MAX_BODY:
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
    data = await resp.content.read(MAX_BODY + 1)
    while len(data) <= MAX_BODY and (more := await resp.content.read(MAX_BODY + 1 - len(data))):
        data += more
    if len(data) > MAX_BODY:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _mismatch(address: str) -> Unauthorized:
    return Unauthorized(f"the server at {address} is not the cluster your token is for (CA fingerprint mismatch)",
                        code="ca_fingerprint_mismatch",
                        hint="check the address; make the token on a node of the cluster you want to join. "
                             "If both are right, something may be intercepting the connection")


def _unreachable(address: str, exc: BaseException) -> Unavailable:
    return Unavailable(cannot_reach("a floydd node", address, exc),
                       hint="check the address and port, and that floydd runs there with a cluster initialised")
