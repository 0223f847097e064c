"""The cluster CA: one ECDSA P-256 key and a self-signed certificate per cluster.

``floydd init`` creates it (``ClusterCA.create``); the node holding it signs the node
certificates of joining boxes (``issue_node_cert``). Files in the CA folder:

    ca.pem        the CA certificate (public, 0644)
    ca.key        the CA private key (0600; never logged, never in a repr)
    issued.jsonl  one line per certificate issued: serial, node id, expiry (0600)

The CA certificate is valid for 10 years, node certificates for 1 year by default
(``cert_validity`` in the config of the node that signs; nodes renew theirs well before
expiry, :mod:`floydd.daemon.joining`). A node
certificate names its node id twice, as subject CN and as DNS SAN, plus the IP
addresses the node gave; it is good for both TLS server and client auth, so one
certificate serves both ends of node-to-node mutual TLS.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from floydd.errors import Conflict, InvalidName, InvalidSpec, NotFound
from floydd.security._files import ensure_private_dir, read_private, read_public, write_private, write_public
from floydd.security._x509 import check_node_id, fingerprint_of_der, short_fingerprint

__all__ = ["ClusterCA", "IssuedCert", "CA_VALIDITY", "NODE_VALIDITY"]

log = logging.getLogger("floydd.security")

CA_VALIDITY = dt.timedelta(days=3650)
NODE_VALIDITY = dt.timedelta(days=365)
CLOCK_SKEW = dt.timedelta(hours=1)
"""Certificates start this long before they are made, so a peer whose clock lags the issuer's
(or an issuer whose clock runs ahead) still accepts them: boxes whose clocks differ by up to
an hour still shake hands (issue 21; ``floydd members`` shows each box's offset and flags one
past ``max_clock_skew``). Expiry has no such leeway: certificates are renewed long before."""
MAX_ADDRESSES = 32

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_CLUSTER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True, slots=True, kw_only=True)
class IssuedCert:
    """One line of the CA's ledger of issued node certificates."""
    serial: str
    node_id: str
    not_after: float
    fingerprint: str


class ClusterCA:
    """A loaded cluster CA. Make one with :meth:`create` or :meth:`load`."""

    CERT_FILE = "ca.pem"
    KEY_FILE = "ca.key"
    LEDGER_FILE = "issued.jsonl"

    def __init__(self, folder: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.folder = Path(folder)
        self.cert = cert
        self._key = key
        self._clock = clock
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        self.fingerprint = fingerprint_of_der(cert.public_bytes(serialization.Encoding.DER))
        orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        self.cluster_name = str(orgs[0].value) if orgs else ""

    @classmethod
    def create(cls, folder: Path, cluster_name: str, *, clock: Callable[[], float] = time.time) -> ClusterCA:
        """Make a new CA key and certificate in ``folder``; refuse if one is there already."""
        if not isinstance(cluster_name, str) or not _CLUSTER_NAME_RE.fullmatch(cluster_name):
            raise InvalidName(f"cluster name {cluster_name!r} is not valid",
                              hint="use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
        folder = ensure_private_dir(Path(folder))
        if (folder / cls.KEY_FILE).exists() or (folder / cls.CERT_FILE).exists():
            raise Conflict(f"a cluster CA already exists in {folder}",
                           hint="this node is already initialised; use ClusterCA.load, or remove the folder "
                                "to start a new cluster (every node will have to join again)")
        key = ec.generate_private_key(ec.SECP256R1())
        now = _utc(clock())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "floydd cluster CA"),
                          x509.NameAttribute(NameOID.ORGANIZATION_NAME, cluster_name)])
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (x509.CertificateBuilder()
                .subject_name(name).issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + CA_VALIDITY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(_key_usage(cert_sign=True), critical=True)
                .add_extension(ski, critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
                .sign(key, hashes.SHA256()))
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        write_private(folder / cls.KEY_FILE, key_pem)
        write_public(folder / cls.CERT_FILE, cert.public_bytes(serialization.Encoding.PEM))
        ca = cls(folder, cert, key, clock=clock)
        log.info("created cluster CA for %s (%s)", cluster_name, ca.short_fingerprint)
        return ca

    @classmethod
    def load(cls, folder: Path, *, clock: Callable[[], float] = time.time) -> ClusterCA:
        """Load the CA from ``folder``; the key file must be owner-only."""
        folder = Path(folder)
        if not (folder / cls.KEY_FILE).exists():
            raise NotFound(f"no cluster CA in {folder}",
                           hint="run 'floydd init' on the first node; other nodes join with a token")
        key = serialization.load_pem_private_key(read_private(folder / cls.KEY_FILE), password=None)
        cert = x509.load_pem_x509_certificate(read_public(folder / cls.CERT_FILE))
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
            raise InvalidSpec(f"the CA key in {folder} does not belong to its certificate",
                              hint="restore ca.key and ca.pem together from the same backup")
        return cls(folder, cert, key, clock=clock)

    @classmethod
    def install(cls, folder: Path, cert_pem: bytes, key_pem: bytes, *, expect_fingerprint: str,
                clock: Callable[[], float] = time.time) -> ClusterCA:
        """Save a CA key handed over by another voter (the certificate must be the pinned one,
        the key its own); written 0600 like the original."""
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        if fingerprint_of_der(cert.public_bytes(serialization.Encoding.DER)) != expect_fingerprint:
            raise InvalidSpec("the CA handed over is not this cluster's CA (fingerprint mismatch)",
                              hint="only a voter of this cluster may hand over its CA key")
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
            raise InvalidSpec("the CA key handed over does not belong to the CA certificate",
                              hint="the voter that sent it has damaged CA files: restore its ca.key and ca.pem")
        folder = ensure_private_dir(Path(folder))
        write_public(folder / cls.CERT_FILE, cert.public_bytes(serialization.Encoding.PEM))
        write_private(folder / cls.KEY_FILE, key_pem)
        log.info("this node now holds the cluster CA key (%s)", short_fingerprint(expect_fingerprint))
        return cls(folder, cert, key, clock=clock)

    def key_pem(self) -> bytes:
        """The CA key, PEM (only ever sent to another voter over mutual TLS)."""
        return self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    @property
    def short_fingerprint(self) -> str:
        return short_fingerprint(self.fingerprint)

    def check_csr(self, csr_pem: bytes | str, node_id: str) -> x509.CertificateSigningRequest:
        """Parse and vet a node's CSR: signed, a P-256 or Ed25519 key, subject exactly CN=node id."""
        check_node_id(node_id)
        data = csr_pem.encode() if isinstance(csr_pem, str) else csr_pem
        try:
            csr = x509.load_pem_x509_csr(data)
        except ValueError:
            raise InvalidSpec("the certificate request is not a PEM CSR",
                              hint="send the CSR made by floydd.security.identity.make_csr") from None
        if not csr.is_signature_valid:
            raise InvalidSpec("the certificate request's signature does not verify",
                              hint="make the CSR again with the node's own key")
        public = csr.public_key()
        if not (isinstance(public, ed25519.Ed25519PublicKey)
                or (isinstance(public, ec.EllipticCurvePublicKey) and isinstance(public.curve, ec.SECP256R1))):
            kind = getattr(getattr(public, "curve", None), "name", None) or type(public).__name__
            raise InvalidSpec(f"the certificate request has a {kind} key",
                              hint="floydd accepts EC P-256 or Ed25519 node keys")
        attrs = list(csr.subject)
        if len(attrs) != 1 or attrs[0].oid != NameOID.COMMON_NAME or attrs[0].value != node_id:
            raise InvalidSpec("the certificate request's subject must be exactly CN=<node id>",
                              hint=f"make the CSR for node id {node_id}")
        return csr

    def check_request(self, csr_pem: bytes | str, node_id: str, addresses: Iterable[str] = (), *,
                      allow_reissue: bool = False) -> tuple[x509.CertificateSigningRequest, list[_IP]]:
        """Everything :meth:`issue_node_cert` checks, without signing (join calls it before using the token)."""
        csr = self.check_csr(csr_pem, node_id)
        ips = _ip_addresses(addresses)
        if not allow_reissue and any(c.node_id == node_id for c in self.issued()):
            raise Conflict(f"node id {node_id} already has a certificate from this cluster",
                           hint="a new box gets a fresh node id; remove the old node first to reuse one")
        return csr, ips

    def issue_node_cert(self, csr_pem: bytes | str, node_id: str, addresses: Iterable[str] = (), *,
                        allow_reissue: bool = False, validity: float | None = None) -> bytes:
        """Sign a node certificate for ``node_id`` valid ``validity`` seconds (default a year);
        returns PEM. Refuses a node id already issued by this CA's files unless ``allow_reissue``
        (joins through any voter check the replicated records instead; renewals reissue)."""
        csr, ips = self.check_request(csr_pem, node_id, addresses, allow_reissue=allow_reissue)
        if validity is not None and not 0 < validity <= CA_VALIDITY.total_seconds():
            raise InvalidSpec(f"certificate validity {validity:g}s is out of range",
                              hint="set cert_validity to a number of seconds, at most 10 years")
        life = NODE_VALIDITY if validity is None else dt.timedelta(seconds=validity)
        now = _utc(self._clock())
        ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        sans: list[x509.GeneralName] = [x509.DNSName(node_id), *(x509.IPAddress(ip) for ip in ips)]
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id),
                                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, self.cluster_name)]))
                .issuer_name(self.cert.subject)
                .public_key(csr.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - CLOCK_SKEW).not_valid_after(min(now + life, self.cert.not_valid_after_utc))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(_key_usage(cert_sign=False), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(csr.public_key()), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
                .sign(self._key, hashes.SHA256()))
        issued = IssuedCert(serial=f"{cert.serial_number:x}", node_id=node_id,
                            not_after=cert.not_valid_after_utc.timestamp(),
                            fingerprint=fingerprint_of_der(cert.public_bytes(serialization.Encoding.DER)))
        self._record(issued)
        log.info("issued a node certificate to %s (serial %s, addresses %s)",
                 node_id, issued.serial[:16], ", ".join(map(str, ips)) or "none")
        return cert.public_bytes(serialization.Encoding.PEM)

    def issued(self) -> list[IssuedCert]:
        """Every node certificate this CA has issued, oldest first."""
        path = self.folder / self.LEDGER_FILE
        if not path.exists():
            return []
        return [IssuedCert(**json.loads(line)) for line in read_private(path).decode().splitlines() if line]

    def __repr__(self) -> str:
        return f"ClusterCA(cluster={self.cluster_name!r}, fingerprint={self.short_fingerprint!r})"

    def _record(self, issued: IssuedCert) -> None:
        line = json.dumps({"serial": issued.serial, "node_id": issued.node_id,
                           "not_after": issued.not_after, "fingerprint": issued.fingerprint}) + "\n"
        fd = os.open(self.folder / self.LEDGER_FILE,
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
                         crl_sign=cert_sign, encipher_only=False, decipher_only=False)


def _ip_addresses(addresses: Iterable[str]) -> list[_IP]:
    if isinstance(addresses, (str, bytes)):
        raise InvalidSpec("addresses must be a list of IP addresses, not one string",
                          hint='send e.g. ["192.168.1.20"]')
    out: list[_IP] = []
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise InvalidSpec(f"address {str(address)[:60]!r} is not an IP address",
                              hint="give the node's IP addresses, e.g. 192.168.1.20 or fe80::1") from None
        if ip not in out:
            out.append(ip)
    if len(out) > MAX_ADDRESSES:
        raise InvalidSpec(f"too many addresses ({len(out)})", hint=f"give at most {MAX_ADDRESSES}")
    return out
