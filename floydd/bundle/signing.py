"""Who made an export: the manifest signed by the exporting box's node key, and the chain to its cluster.

Every box has a node key (EC P-256, ``STATE/tls/node.key``); the cluster CA's key lives on
the box that ran ``floydd init`` only, so an export made on any other box could not be signed
by it. The export is therefore signed by the **node key of the box that wrote it**, and the
seal carries that box's certificate and the CA certificate that issued it: the importer checks
that the CA issued the certificate and that the certificate's key made the signature, and the
**origin** of the file is the CA's fingerprint (sha256 of its DER form, as join tokens pin it):
every box of one cluster exports with the same origin, and a re-import is recognised by it.

A box alone that was never ``floydd init``-ed has no certificate: its export is signed by its
node key alone, the seal carries the public key, and the origin is ``box:`` and the sha256 of
that key (its kind says so: the import names it "a box alone", not a cluster). Either way the
importing site learns *which* cluster or box made the file, not that it may trust it: it has
no CA of the other site to check against (an air-gapped site may never have one). So the
import shows the origin's fingerprint and name, ``floyd import --expect-origin FINGERPRINT``
refuses any other, and the person compares the fingerprint with the exporting site (``floydd
members`` there prints its CA fingerprint). The manifest's MAC under the export key (which
only the two sites hold) is what makes a re-signed file from a third party fail.

Certificates are not checked for expiry: an export read years later, offline, is still the
export it was; the signature was made while the box held the key.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from floydd.errors import IntegrityError

__all__ = ["Origin", "signer", "sign", "verify", "ALGORITHM"]

ALGORITHM = "ecdsa-p256-sha256"


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """The cluster (or lone box) that signed an export."""

    kind: str           # "cluster" or "box"
    fingerprint: str    # the CA's sha256 (hex), or "box:" + the node key's sha256
    name: str           # the cluster's name (the CA's organisation), or the box's node id
    node_id: str        # the box that wrote it

    @property
    def short(self) -> str:
        return self.fingerprint.removeprefix("box:")[:16]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "fingerprint": self.fingerprint, "name": self.name, "node_id": self.node_id,
                "short": self.short}

    def describe(self) -> str:
        if self.kind == "cluster":
            return f"cluster {self.name or '(unnamed)'} (CA sha256:{self.short}), written by box {self.node_id}"
        return f"a box alone, never floydd init-ed (node {self.node_id}, key sha256:{self.short})"


def signer(identity) -> dict:
    """What the manifest says of its signer (``identity``, a :class:`NodeIdentity`): the
    algorithm, the box, and its certificate chain or, for a box alone, its public key. It is
    part of the manifest, so the MAC and the signature cover it too."""
    who = {"alg": ALGORITHM, "node_id": identity.node_id}
    if identity.is_member:
        who["chain"] = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (identity.cert, identity.ca_cert)]
    else:
        who["public_key"] = identity.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return who


def sign(identity, manifest: bytes) -> str:
    """``identity``'s signature of ``manifest`` (base64)."""
    return base64.b64encode(identity.key.sign(manifest, ec.ECDSA(hashes.SHA256()))).decode()


def verify(manifest: bytes, who: object, signature: object, *, where: str = "the export") -> Origin:
    """The origin that signed ``manifest`` (``who``: its ``signer`` entry); ``IntegrityError``
    if the signature or the chain fails."""
    def bad(why: str) -> IntegrityError:
        return IntegrityError(f"{where} is not validly signed: {why}", code="export_signature",
                              hint="the file was altered after it was made; get it again from the exporting site")
    if not isinstance(who, dict) or who.get("alg") != ALGORITHM:
        raise bad("its signer is unknown or malformed")
    try:
        raw = base64.b64decode(str(signature), validate=True)
        node_id = str(who.get("node_id") or "")
        if "chain" in who:
            cert, ca = (x509.load_pem_x509_certificate(pem.encode()) for pem in who["chain"])
            key = cert.public_key()
        else:
            cert = ca = None
            key = serialization.load_pem_public_key(who["public_key"].encode())
    except (KeyError, TypeError, ValueError, AttributeError):
        raise bad("its signer is malformed") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise bad("it is not signed with an EC key")
    if ca is not None:
        try:
            ca.verify_directly_issued_by(ca)
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError):
            raise bad("the signing box's certificate was not issued by the CA it names") from None
    try:
        key.verify(raw, manifest, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise bad("the signature does not match the manifest") from None
    if ca is None:
        der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return Origin(kind="box", fingerprint="box:" + hashlib.sha256(der).hexdigest(), name=node_id, node_id=node_id)
    orgs = ca.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return Origin(kind="cluster", fingerprint=hashlib.sha256(ca.public_bytes(serialization.Encoding.DER)).hexdigest(),
                  name=str(orgs[0].value) if orgs else "", node_id=node_id)
