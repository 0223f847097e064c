"""This node's identity: a stable node id, its private key, its certificate, the cluster CA.

Files in the identity folder (the daemon uses ``STATE/tls/``, kept 0700):

    node-id   16 hex digits, made once, never changes
    node.key  the node's EC P-256 private key (0600)
    node.pem  the node certificate followed by the CA certificate (the chain TLS presents)
    ca.pem    the cluster CA certificate this node trusts

A fresh box has a node id but no certificate until ``floydd init`` (which makes
the CA and signs its own certificate, :func:`init_cluster`) or ``floydd join``. Its key is
made on first use (:attr:`NodeIdentity.key`: ``init``, ``join``, the first export it signs),
and a box alone reads it only then: a box alone starts without ``cryptography``, whose ~8 MiB
an idle daemon would otherwise carry all day (issue 23). A member's key and certificates are
read when it loads, as before (its TLS contexts want them at once).

Renewal swaps the certificate in place: the TLS contexts made for this identity
(:mod:`floydd.security.tls`) are remembered, and :meth:`NodeIdentity.install` loads the new
chain into each of them, so new connections present the new certificate while connections
already open finish with the old one; no listener restarts. The key stays the same across
renewals, so ``node.key`` and ``node.pem`` never disagree on disk, even after a crash between
two writes.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from floydd.errors import InvalidSpec, NotFound
from floydd.security._files import ensure_private_dir, read_private, read_public, write_private, write_public
from floydd.security._x509 import (check_node_id, fingerprint_of_der, load_certs, new_node_id, node_id_of_cert,
                                   short_fingerprint)

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from floydd.security.ca import ClusterCA

__all__ = ["NodeIdentity", "make_csr", "init_cluster"]

log = logging.getLogger("floydd.security")


def make_csr(key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey, node_id: str) -> bytes:
    """A PEM CSR with subject exactly ``CN=<node id>``, signed by ``key`` (EC P-256 or Ed25519)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID
    check_node_id(node_id)
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
           .sign(key, None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()))
    return csr.public_bytes(serialization.Encoding.PEM)


class NodeIdentity:
    """Who this node is. Make one with :meth:`load_or_create` (fresh box) or :meth:`load` (member)."""

    ID_FILE = "node-id"
    KEY_FILE = "node.key"
    CERT_FILE = "node.pem"
    CA_FILE = "ca.pem"

    def __init__(self, folder: Path, node_id: str, key: ec.EllipticCurvePrivateKey | None,
                 cert: x509.Certificate | None = None, ca_cert: x509.Certificate | None = None) -> None:
        self.folder = Path(folder)
        self.node_id = check_node_id(node_id)
        self._key = key                 # None: read, or made, on first use (:attr:`key`)
        self._key_lock = threading.Lock()
        self.cert = cert
        self.ca_cert = ca_cert
        self._contexts: weakref.WeakSet[ssl.SSLContext] = weakref.WeakSet()

    @classmethod
    def load_or_create(cls, folder: Path) -> NodeIdentity:
        """Load the identity in ``folder``, first making a node id if it has none (and its key
        when first used, :attr:`key`)."""
        folder = ensure_private_dir(Path(folder))
        id_path = folder / cls.ID_FILE
        if not id_path.exists():
            write_public(id_path, (new_node_id() + "\n").encode())
        return cls._read(folder)

    @classmethod
    def load(cls, folder: Path) -> NodeIdentity:
        """Load a node that is a cluster member (has a certificate); NotFound otherwise."""
        folder = Path(folder)
        if not (folder / cls.CERT_FILE).exists() or not (folder / cls.KEY_FILE).exists():
            raise NotFound(f"this node has no cluster certificate in {folder}",
                           hint="run 'floydd init' to start a cluster, or 'floydd join TOKEN' to join one")
        return cls._read(folder)

    @classmethod
    def _read(cls, folder: Path) -> NodeIdentity:
        node_id = read_public(folder / cls.ID_FILE).decode().strip()
        key = cert = ca_cert = None
        if (folder / cls.CERT_FILE).exists():      # a member: its TLS wants all of it at start
            key = _load_or_make_key(folder / cls.KEY_FILE)
            cert = load_certs(read_public(folder / cls.CERT_FILE), "node.pem")[0]
            ca_cert = load_certs(read_public(folder / cls.CA_FILE), "ca.pem")[0]
        return cls(folder, node_id, key, cert, ca_cert)

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        """The node key, read from ``node.key`` on first use, or made there (0600) if it has none."""
        if self._key is None:
            with self._key_lock:        # two threads asking first: one reads (or makes) it
                if self._key is None:
                    self._key = _load_or_make_key(self.key_path)
        return self._key

    @property
    def is_member(self) -> bool:
        return self.cert is not None and self.ca_cert is not None

    @property
    def key_path(self) -> Path:
        return self.folder / self.KEY_FILE

    @property
    def cert_path(self) -> Path:
        """The chain file: node certificate, then the CA certificate."""
        return self.folder / self.CERT_FILE

    @property
    def ca_path(self) -> Path:
        return self.folder / self.CA_FILE

    @property
    def ca_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization
        return self._member_ca().public_bytes(serialization.Encoding.PEM)

    @property
    def cluster_fingerprint(self) -> str:
        """sha256 (hex) of the cluster CA certificate this node trusts."""
        from cryptography.hazmat.primitives import serialization
        return fingerprint_of_der(self._member_ca().public_bytes(serialization.Encoding.DER))

    def make_csr(self) -> bytes:
        return make_csr(self.key, self.node_id)

    @property
    def serial(self) -> str:
        """The node certificate's serial number, lowercase hex (what the cluster records)."""
        return f"{self._member_cert().serial_number:x}"

    @property
    def not_before(self) -> float:
        return self._member_cert().not_valid_before_utc.timestamp()

    @property
    def not_after(self) -> float:
        return self._member_cert().not_valid_after_utc.timestamp()

    @property
    def addresses(self) -> list[str]:
        """The IP addresses the node certificate names (a renewal asks for the same)."""
        from cryptography import x509
        try:
            san = self._member_cert().extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return []
        return [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]

    def track_context(self, ctx: ssl.SSLContext) -> ssl.SSLContext:
        """Remember ``ctx`` (made from this identity): :meth:`install` reloads it in place."""
        self._contexts.add(ctx)
        return ctx

    def install(self, cert_pem: bytes | str, ca_pem: bytes | str, *, expect_ca_fingerprint: str | None = None) -> None:
        """Check and save the node certificate and CA a cluster gave this node."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        cert = load_certs(_b(cert_pem), "the node certificate")[0]
        ca = load_certs(_b(ca_pem), "the CA certificate")[0]
        fingerprint = fingerprint_of_der(ca.public_bytes(serialization.Encoding.DER))
        if expect_ca_fingerprint is not None and fingerprint != expect_ca_fingerprint:
            raise InvalidSpec("the CA certificate is not the one expected (CA fingerprint mismatch)",
                              hint="make a new join token on a node of the cluster you mean to join")
        try:
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError) as exc:
            raise InvalidSpec("the node certificate was not issued by the cluster CA",
                              hint="join again with a fresh token") from exc
        if cert.public_key() != self.key.public_key():
            raise InvalidSpec("the node certificate is for another key", hint="join again with a fresh token")
        if node_id_of_cert(cert) != self.node_id:
            raise InvalidSpec(f"the node certificate does not name this node ({self.node_id})",
                              hint="join again with a fresh token")
        if self.ca_cert is not None and ca != self.ca_cert:
            raise InvalidSpec("the new certificate is from another cluster's CA",
                              hint="a renewal keeps the cluster; to move to another cluster, leave and join")
        ca_bytes = ca.public_bytes(serialization.Encoding.PEM)
        write_public(self.ca_path, ca_bytes)
        write_public(self.cert_path, cert.public_bytes(serialization.Encoding.PEM) + ca_bytes)
        self.cert, self.ca_cert = cert, ca
        for ctx in list(self._contexts):   # new handshakes present the new chain; open connections finish
            ctx.load_cert_chain(self.cert_path, self.key_path)
        log.info("node %s holds a certificate of cluster %s", self.node_id, short_fingerprint(fingerprint))

    def __repr__(self) -> str:
        fp = short_fingerprint(self.cluster_fingerprint) if self.is_member else None
        return f"NodeIdentity(node_id={self.node_id!r}, cluster={fp!r}, folder={str(self.folder)!r})"

    def _member_cert(self) -> x509.Certificate:
        if self.cert is None:
            raise NotFound(f"node {self.node_id} is not in a cluster yet",
                           hint="run 'floydd init' to start a cluster, or 'floydd join TOKEN' to join one")
        return self.cert

    def _member_ca(self) -> x509.Certificate:
        if self.ca_cert is None:
            raise NotFound(f"node {self.node_id} is not in a cluster yet",
                           hint="run 'floydd init' to start a cluster, or 'floydd join TOKEN' to join one")
        return self.ca_cert


def init_cluster(ca_folder: Path, tls_folder: Path, cluster_name: str, addresses: Iterable[str] = (), *,
                 clock: Callable[[], float] = time.time,
                 validity: float | None = None) -> tuple[ClusterCA, NodeIdentity]:
    """``floydd init``: make the cluster CA and sign this node's own certificate with it."""
    from floydd.security.ca import ClusterCA
    ca = ClusterCA.create(ca_folder, cluster_name, clock=clock)
    identity = NodeIdentity.load_or_create(tls_folder)
    identity.install(ca.issue_node_cert(identity.make_csr(), identity.node_id, addresses, validity=validity),
                     ca.cert_pem)
    return ca, identity


def _load_or_make_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The EC P-256 key in ``path``; a new one written there (0600) if it has none."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    if not path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        return key
    key = serialization.load_pem_private_key(read_private(path), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InvalidSpec(f"the node key in {path.parent} is not an EC key", hint="remove node.key to make a new one")
    return key


def _b(text: bytes | str) -> bytes:
    return text.encode() if isinstance(text, str) else text
