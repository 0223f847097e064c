"""What ``floyd`` on a laptop trusts: the cluster CA it pinned at ``floyd login``.

Like SSH's known_hosts. The first contact (:func:`first_contact`) is TLS that verifies
nothing, over which only ``GET /v1/ca`` is sent (no token, no other request): it answers
the CA certificate, and the server's own certificate on that same connection must be issued
by it. The caller then compares the CA's fingerprint with one it was given (a join token
carries it; ``floydd members`` and ``floydd init`` print it) or shows it to the person to
confirm, exactly as SSH asks about a new host key. Every later connection
(:func:`pinned_context`) accepts only a server whose certificate that CA signed, so a token
is never sent to anyone else; a box of the cluster is named by its certificate, not by
the address the laptop used (addresses change, the cluster CA does not).

Fingerprints are given in the forms the project prints (:func:`parse_fingerprint`): the 64
hex digits, ``sha256:`` and at least the first 16 of them, or a whole join token.
"""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from floydd.errors import InvalidSpec, Unauthorized, Unavailable
from floydd.security._x509 import fingerprint_of_der, node_id_of_cert, short_fingerprint

__all__ = ["Contact", "first_contact", "pinned_context", "parse_fingerprint", "fingerprint_of_pem",
           "matches", "CA_MISMATCH"]

CA_MISMATCH = "ca_fingerprint_mismatch"
_FP = re.compile(r"(?:sha256:)?([0-9a-f]{16,64})")
_MAX_CA = 64 * 1024


@dataclass(frozen=True, slots=True)
class Contact:
    """What the first, unverified connection showed: the CA and the box that answered."""

    ca_pem: bytes
    fingerprint: str
    node_id: str | None

    @property
    def short(self) -> str:
        return short_fingerprint(self.fingerprint)


def parse_fingerprint(text: str) -> str:
    """The hex digits of a fingerprint as the project prints one, or the CA fingerprint inside
    a join token; InvalidSpec naming the shapes it takes otherwise."""
    cleaned = "".join(str(text).split()).lower()
    if cleaned.startswith("fld1."):
        from floydd.security.tokens import parse_token
        return parse_token(str(text)).ca_fingerprint
    match = _FP.fullmatch(cleaned)
    if match is None:
        raise InvalidSpec(f"{str(text)[:80]!r} is not a CA fingerprint",
                          hint="give the 64 hex digits, sha256:<at least 16 of them> as floydd members prints it, "
                               "or a join token of the cluster")
    return match.group(1)


def matches(fingerprint: str, expected: str) -> bool:
    """Whether ``fingerprint`` (64 hex) is the one ``expected`` (from :func:`parse_fingerprint`) names."""
    return len(expected) >= 16 and fingerprint.startswith(expected)


def fingerprint_of_pem(pem: bytes) -> str:
    return fingerprint_of_der(x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER))


def first_contact(host: str, port: int, *, timeout: float = 15.0) -> Contact:
    """The CA a box at ``host:port`` answers, checked against its own certificate (module
    docstring). Sends nothing but ``GET /v1/ca``. Unavailable when nothing answers there,
    Unauthorized (``ca_fingerprint_mismatch``) when the answer does not hold together."""
    unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    unverified.minimum_version = ssl.TLSVersion.TLSv1_2
    conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=unverified)
    try:
        conn.request("GET", "/v1/ca", headers={"Accept": "application/x-pem-file"})
        leaf_der = conn.sock.getpeercert(binary_form=True)
        resp = conn.getresponse()
        body = resp.read(_MAX_CA + 1)
    except ssl.SSLError as exc:
        raise Unavailable(f"{host}:{port} does not speak TLS as a floydd box does ({exc.reason or exc})",
                          hint="give the address of a box's API: floyd login HOST[:7655]") from None
    except (OSError, http.client.HTTPException) as exc:
        raise Unavailable(f"cannot reach floydd at {host}:{port}: {exc}",
                          hint="check the address and that the box runs floydd in a cluster (floydd init)") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise Unavailable(f"{host}:{port} answered HTTP {resp.status} when asked for its cluster CA",
                          hint="is this a floydd box of a cluster? (floydd init makes one of a box)")
    try:
        ca = x509.load_pem_x509_certificate(body[:_MAX_CA])
        leaf = x509.load_der_x509_certificate(leaf_der)
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise Unauthorized(f"{host}:{port} presented a certificate its own CA did not sign", code=CA_MISMATCH,
                           hint="something between you and the box may be intercepting: do not log in") from None
    return Contact(ca_pem=ca.public_bytes(serialization.Encoding.PEM),
                   fingerprint=fingerprint_of_der(ca.public_bytes(serialization.Encoding.DER)),
                   node_id=node_id_of_cert(leaf))


def pinned_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context that accepts only servers whose certificate ``ca_pem`` signed (no
    host-name check: a box is known by its cluster's CA; see the module docstring)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=ca_pem.decode() if isinstance(ca_pem, bytes) else ca_pem)
    return ctx
