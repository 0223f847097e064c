"""What ``floyd`` on a laptop trusts: the cluster CA it pinned at ``floyd login``.

Like SSH's known_hosts. The first contact (:func:`first_contact`) is TLS that verifies
nothing, over which only ``GET /v1/ca`` is sent (no token, no other request): it answers
the CA certificate, and the server's own certificate on that same connection must be issued
by it. The caller then compares the CA's fingerprint with one it was given (a join token
carries it; ``floydd members`` and ``floydd init`` print it) or shows it to the person to
confirm, exactly as SSH asks about a new host key. The same answer (asked for as JSON) says
which box answered and what it knows of the lab: its members and the certificates the lab
revoked (:class:`~floydd.security.boxpin.Trust`); an older box answers the PEM alone.

Every later connection (:func:`pinned_context`) accepts only a server whose certificate that
CA signed, and then, before the request and its token are written, only the box the login
pinned (:func:`floydd.security.boxpin.admit`: its node id, a certificate the lab did not
revoke), so a token is never sent to anyone else, a removed box of the lab included.

Fingerprints are given in the forms the project prints (:func:`parse_fingerprint`): the 64
hex digits, ``sha256:`` and at least the first 16 of them, or a whole join token.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from floydd.errors import InvalidSpec, Unauthorized, Unavailable
from floydd.security._x509 import fingerprint_of_der, node_id_of_cert, short_fingerprint
from floydd.security.boxpin import Trust

__all__ = ["Contact", "first_contact", "pinned_context", "parse_fingerprint", "fingerprint_of_pem",
           "matches", "read_ca_answer", "CA_MISMATCH", "ACCEPT_CA"]

CA_MISMATCH = "ca_fingerprint_mismatch"
ACCEPT_CA = "application/json, application/x-pem-file;q=0.5"
"""What a laptop asks ``/v1/ca`` for: the JSON answer (CA, the box, members, revocations) where
the box gives it, else (a box of an older release) the PEM alone."""
_FP = re.compile(r"(?:sha256:)?([0-9a-f]{16,64})")
_MAX_CA = 1 << 20               # the CA, and the lists of a large lab


@dataclass(frozen=True, slots=True)
class Contact:
    """What the first, unverified connection showed: the CA, the box that answered (its node
    id, from its certificate) and what that box said of the lab (empty from an older box)."""

    ca_pem: bytes
    fingerprint: str
    node_id: str | None
    trust: Trust = field(default_factory=Trust)

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
        conn.request("GET", "/v1/ca", headers={"Accept": ACCEPT_CA})
        leaf_der = conn.sock.getpeercert(binary_form=True)
        resp = conn.getresponse()
        body = resp.read(_MAX_CA + 1)
        kind = resp.getheader("Content-Type", "")
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
    pem, trust = read_ca_answer(body[:_MAX_CA], kind)
    try:
        ca = x509.load_pem_x509_certificate(pem)
        leaf = x509.load_der_x509_certificate(leaf_der)
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise Unauthorized(f"{host}:{port} presented a certificate its own CA did not sign", code=CA_MISMATCH,
                           hint="something between you and the box may be intercepting: do not log in") from None
    return Contact(ca_pem=ca.public_bytes(serialization.Encoding.PEM),
                   fingerprint=fingerprint_of_der(ca.public_bytes(serialization.Encoding.DER)),
                   node_id=node_id_of_cert(leaf), trust=trust)


def read_ca_answer(body: bytes, content_type: str) -> tuple[bytes, Trust]:
    """``/v1/ca``'s answer -> (CA PEM, what the box said of the lab). A JSON answer whose lists
    do not parse still gives its CA (the lists are then empty: only names in messages and
    revocations are lost, never the pin); a PEM answer (an older box) gives no lists."""
    if not content_type.startswith("application/json"):
        return body, Trust()
    try:
        payload = json.loads(body)
        pem = payload["ca"].encode()
    except (ValueError, TypeError, KeyError, AttributeError):
        return b"", Trust()                 # refused by the caller: not a certificate
    try:
        trust = Trust.from_json(payload)
    except ValueError:
        trust = Trust()
    return pem, trust


def pinned_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context that accepts only servers whose certificate ``ca_pem`` signed (no
    host-name check: a box is known by its cluster's CA; see the module docstring)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=ca_pem.decode() if isinstance(ca_pem, bytes) else ca_pem)
    return ctx
