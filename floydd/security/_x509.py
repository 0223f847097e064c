"""Small certificate helpers shared by the CA, the node identity, TLS and join.

The functions that parse certificates import ``cryptography`` when called: node ids and
fingerprints are wanted by a box alone, which never loads it (issue 23).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import TYPE_CHECKING

from floydd.errors import InvalidSpec

if TYPE_CHECKING:
    from cryptography import x509

__all__ = ["fingerprint_of_der", "short_fingerprint", "new_node_id", "check_node_id", "node_id_of_cert",
           "load_certs", "FINGERPRINT_RE", "NODE_ID_RE"]

NODE_ID_RE = re.compile(r"[0-9a-f]{16}")
"""A node id: 16 lowercase hex digits (64 random bits), a valid DNS label too."""

FINGERPRINT_RE = re.compile(r"[0-9a-f]{64}")
"""A CA fingerprint: sha256 of the DER certificate, 64 lowercase hex digits."""


def fingerprint_of_der(der: bytes) -> str:
    """sha256 of a DER certificate, lowercase hex (what join tokens pin)."""
    return hashlib.sha256(der).hexdigest()


def short_fingerprint(fingerprint: str) -> str:
    """The display form: ``sha256:`` and the first 16 hex digits."""
    return f"sha256:{fingerprint[:16]}"


def new_node_id() -> str:
    return secrets.token_hex(8)


def check_node_id(node_id: object) -> str:
    if not isinstance(node_id, str) or not NODE_ID_RE.fullmatch(node_id):
        shown = repr(node_id)[:40]
        raise InvalidSpec(f"node id {shown} is malformed",
                          hint="a node id is 16 lowercase hex digits, e.g. 3f9a0c1d2b4e5f60")
    return node_id


def node_id_of_cert(cert: x509.Certificate) -> str | None:
    """The node id a node certificate names: its DNS SAN that agrees with its CN, else None."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = cns[0].value if len(cns) == 1 else None
    if not isinstance(cn, str) or not NODE_ID_RE.fullmatch(cn):
        return None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return cn if cn in san.get_values_for_type(x509.DNSName) else None


def load_certs(pem: bytes, what: str) -> list[x509.Certificate]:
    from cryptography import x509
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        certs = []
    if not certs:
        raise InvalidSpec(f"{what} is not a PEM certificate", hint="pass the PEM text as floydd wrote it")
    return certs
