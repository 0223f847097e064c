"""This node's identity: a stable id, an owner-only key, a checked certificate."""

from __future__ import annotations

import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from floydd.errors import InvalidSpec, NotFound
from floydd.security._x509 import NODE_ID_RE
from floydd.security.ca import ClusterCA
from floydd.security.identity import NodeIdentity, init_cluster, make_csr


def test_a_fresh_box_gets_a_stable_id_and_a_private_key(tmp_path):
    first = NodeIdentity.load_or_create(tmp_path / "tls")
    again = NodeIdentity.load_or_create(tmp_path / "tls")
    assert NODE_ID_RE.fullmatch(first.node_id) and again.node_id == first.node_id
    assert not first.key_path.exists()          # made on first use: a box alone starts without it (issue 23)
    assert again.key.public_key() == first.key.public_key()
    assert stat.S_IMODE(os.stat(first.key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "tls").st_mode) == 0o700
    assert not first.is_member
    with pytest.raises(NotFound, match="not in a cluster"):
        first.cluster_fingerprint
    with pytest.raises(NotFound) as err:
        NodeIdentity.load(tmp_path / "tls")
    assert "floydd join" in err.value.hint
    assert NodeIdentity.load_or_create(tmp_path / "other").node_id != first.node_id


def test_init_cluster_makes_a_member_that_loads_back(tmp_path):
    ca, me = init_cluster(tmp_path / "ca", tmp_path / "tls", "lab", ["127.0.0.1"])
    assert me.is_member and me.cluster_fingerprint == ca.fingerprint
    loaded = NodeIdentity.load(tmp_path / "tls")
    assert loaded.node_id == me.node_id and loaded.cert == me.cert
    assert loaded.cluster_fingerprint == ca.fingerprint
    chain = me.cert_path.read_text()
    assert chain.count("BEGIN CERTIFICATE") == 2 and chain.endswith(ca.cert_pem.decode())
    assert me.node_id in repr(me) and "PRIVATE" not in repr(me)


def test_install_checks_key_node_ca_and_pin(tmp_path, ca):
    me = NodeIdentity.load_or_create(tmp_path / "tls")
    other_ca = ClusterCA.create(tmp_path / "ca2", "elsewhere")
    with pytest.raises(InvalidSpec, match="fingerprint mismatch"):
        me.install(ca.issue_node_cert(me.make_csr(), me.node_id), ca.cert_pem,
                   expect_ca_fingerprint=other_ca.fingerprint)
    someone_else = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(InvalidSpec, match="another key"):
        me.install(ca.issue_node_cert(make_csr(someone_else, me.node_id), me.node_id, allow_reissue=True),
                   ca.cert_pem)
    with pytest.raises(InvalidSpec, match="not issued by the cluster CA"):
        me.install(ca.issue_node_cert(me.make_csr(), me.node_id, allow_reissue=True), other_ca.cert_pem)
    assert not me.is_member and not me.cert_path.exists()
    me.install(ca.issue_node_cert(me.make_csr(), me.node_id, allow_reissue=True), ca.cert_pem,
               expect_ca_fingerprint=ca.fingerprint)
    assert me.is_member
