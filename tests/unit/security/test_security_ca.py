"""The cluster CA: files, certificate shape, and what it refuses to sign."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from floydd.errors import Conflict, FloyddError, InvalidName, InvalidSpec, NotFound
from floydd.security._x509 import fingerprint_of_der, node_id_of_cert
from floydd.security.ca import ClusterCA
from floydd.security.identity import make_csr

NODE = "0123456789abcdef"


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_create_then_load_gives_the_same_ca_and_owner_only_key(tmp_path, ca, clock):
    folder = tmp_path / "ca"
    assert _mode(folder / "ca.key") == 0o600
    assert _mode(folder / "ca.pem") == 0o644
    assert _mode(folder) == 0o700
    again = ClusterCA.load(folder, clock=clock)
    assert again.fingerprint == ca.fingerprint
    assert again.cluster_name == "lab"
    assert again.cert_pem == ca.cert_pem
    der = ca.cert.public_bytes(serialization.Encoding.DER)
    assert ca.fingerprint == fingerprint_of_der(der) and len(ca.fingerprint) == 64
    assert ca.short_fingerprint == "sha256:" + ca.fingerprint[:16]


def test_ca_certificate_is_a_p256_ca_for_ten_years(ca, clock):
    cert = ca.cert
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert isinstance(cert.public_key().curve, ec.SECP256R1)
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign
    lifetime = cert.not_valid_after_utc - dt.datetime.fromtimestamp(clock.now, dt.timezone.utc)
    assert dt.timedelta(days=3649) < lifetime <= dt.timedelta(days=3651)
    cert.verify_directly_issued_by(cert)  # self-signed


def test_create_refuses_an_existing_ca_and_bad_names(tmp_path, ca):
    with pytest.raises(Conflict):
        ClusterCA.create(tmp_path / "ca", "lab")
    with pytest.raises(InvalidName):
        ClusterCA.create(tmp_path / "other", "bad name!")
    with pytest.raises(NotFound) as err:
        ClusterCA.load(tmp_path / "nothing")
    assert "floydd init" in err.value.hint


def test_load_refuses_a_key_others_can_read(tmp_path, ca):
    os.chmod(tmp_path / "ca" / "ca.key", 0o644)
    with pytest.raises(FloyddError) as err:
        ClusterCA.load(tmp_path / "ca")
    assert err.value.code == "insecure_permissions" and "chmod 600" in err.value.hint


def test_issued_certificate_verifies_and_names_the_node(ca, clock):
    key = ec.generate_private_key(ec.SECP256R1())
    pem = ca.issue_node_cert(make_csr(key, NODE), NODE, ["192.168.1.20", "fe80::1"])
    cert = x509.load_pem_x509_certificate(pem)
    cert.verify_directly_issued_by(ca.cert)
    assert cert.public_key() == key.public_key()
    assert node_id_of_cert(cert) == NODE
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == NODE
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [NODE]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("192.168.1.20"),
                                                       ipaddress.ip_address("fe80::1")]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = cert.not_valid_after_utc - dt.datetime.fromtimestamp(clock.now, dt.timezone.utc)
    assert dt.timedelta(days=364) < lifetime <= dt.timedelta(days=366)
    assert [c.node_id for c in ca.issued()] == [NODE]
    assert _mode(ca.folder / "issued.jsonl") == 0o600


def test_an_ed25519_node_key_is_accepted(ca):
    key = ed25519.Ed25519PrivateKey.generate()
    cert = x509.load_pem_x509_certificate(ca.issue_node_cert(make_csr(key, NODE), NODE))
    assert cert.public_key() == key.public_key()


@pytest.mark.parametrize("make_key, words", [
    (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), "RSA"),
    (lambda: ec.generate_private_key(ec.SECP384R1()), "secp384r1"),
])
def test_other_key_types_are_refused(ca, make_key, words):
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE)])).sign(make_key(), hashes.SHA256()))
    with pytest.raises(InvalidSpec) as err:
        ca.issue_node_cert(csr.public_bytes(serialization.Encoding.PEM), NODE)
    assert words in err.value.message and "P-256 or Ed25519" in err.value.hint
    assert ca.issued() == []


def test_subject_and_node_id_must_agree_and_be_well_formed(ca):
    key = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(InvalidSpec, match="CN=<node id>"):
        ca.issue_node_cert(make_csr(key, "ffffffffffffffff"), NODE)
    with pytest.raises(InvalidSpec, match="node id"):
        ca.issue_node_cert(make_csr(key, NODE), "NOT-A-NODE")
    extra = (x509.CertificateSigningRequestBuilder()
             .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE),
                                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "evil")]))
             .sign(key, hashes.SHA256()))
    with pytest.raises(InvalidSpec):
        ca.issue_node_cert(extra.public_bytes(serialization.Encoding.PEM), NODE)
    with pytest.raises(InvalidSpec, match="not a PEM CSR"):
        ca.issue_node_cert(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n", NODE)


def test_addresses_must_be_ips(ca):
    csr = make_csr(ec.generate_private_key(ec.SECP256R1()), NODE)
    with pytest.raises(InvalidSpec, match="not an IP address"):
        ca.issue_node_cert(csr, NODE, ["gpu-box.lab"])
    with pytest.raises(InvalidSpec):
        ca.issue_node_cert(csr, NODE, "10.0.0.1")


def test_a_node_id_is_issued_once(ca):
    csr = make_csr(ec.generate_private_key(ec.SECP256R1()), NODE)
    ca.issue_node_cert(csr, NODE)
    with pytest.raises(Conflict):
        ca.issue_node_cert(make_csr(ec.generate_private_key(ec.SECP256R1()), NODE), NODE)
    ca.issue_node_cert(csr, NODE, allow_reissue=True)
    assert len(ca.issued()) == 2


def test_repr_shows_no_key(tmp_path, ca):
    key_pem = (tmp_path / "ca" / "ca.key").read_text()
    body = "".join(key_pem.splitlines()[1:-1])
    assert body[:24] not in repr(ca) and "PRIVATE" not in repr(ca)
    assert ca.fingerprint[:16] in repr(ca)
