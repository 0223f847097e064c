"""Which server a laptop sends its token to (floydd.security.boxpin): pure, no network."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from floydd.errors import Unauthorized
from floydd.security.boxpin import REVOKED, WRONG_BOX, Pin, Presented, Trust, admit, digest_of, presented
from floydd.security.identity import init_cluster

BOX1, BOX2, BOX3, STRANGER = "1" * 16, "2" * 16, "3" * 16, "4" * 16
ADDRESS = "10.0.0.5:7655"


def _trust(**kw) -> Trust:
    members = kw.pop("members", {BOX1: "box1", BOX2: "box2"})
    revoked = kw.pop("revoked", {"b3old": BOX3, "b3": BOX3})
    return Trust(digest=digest_of(members, revoked), members=members, revoked=revoked,
                 names={**members, BOX3: "box3"}, **kw)


PIN = Pin(address=ADDRESS, node_id=BOX1, trust=_trust())


def _refused(pin: Pin, node_id: str | None, serial: str) -> Unauthorized:
    with pytest.raises(Unauthorized) as refused:
        admit(pin, Presented(node_id=node_id, serial=serial))
    assert "no token was sent" in refused.value.message
    return refused.value


def test_the_pinned_box_passes_with_its_certificate_and_with_a_renewed_one():
    assert admit(PIN, Presented(node_id=BOX1, serial="a1")) is PIN
    assert admit(PIN, Presented(node_id=BOX1, serial="a2")) is PIN       # renewed: a new serial, same node


def test_a_removed_box_at_the_address_is_refused_naming_it_and_what_to_do():
    refused = _refused(PIN, BOX3, "b3")
    assert refused.code == WRONG_BOX
    assert refused.message == ("the server at 10.0.0.5:7655 is not box1 (it presented box3's certificate, removed "
                               "from the lab); no token was sent")
    assert "floyd login again" in refused.hint
    # a certificate of that box the laptop never saw revoked is still the removed box's
    assert "removed from the lab" in _refused(PIN, BOX3, "b3new").message


def test_another_member_or_a_box_never_heard_of_is_refused_too():
    refused = _refused(PIN, BOX2, "c2")
    assert refused.code == WRONG_BOX and "box2's certificate, another box of the lab" in refused.message
    assert f"node {STRANGER}, a box this laptop has not heard of" in _refused(PIN, STRANGER, "d4").message
    assert "names no box" in _refused(PIN, None, "e5").message


def test_the_pinned_box_s_own_revoked_certificate_is_refused():
    pin = Pin(address=ADDRESS, node_id=BOX1, trust=_trust(revoked={"a0": BOX1}, members={BOX1: "box1"}))
    refused = _refused(pin, BOX1, "a0")
    assert refused.code == REVOKED and "box1 that the lab revoked" in refused.message
    assert admit(pin, Presented(node_id=BOX1, serial="a9")) is pin          # it joined again: a new certificate


def test_a_login_of_an_older_floyd_adopts_the_box_that_answers_unless_its_certificate_is_revoked():
    legacy = Pin(address=ADDRESS, node_id=None, trust=_trust())
    adopted = admit(legacy, Presented(node_id=BOX2, serial="c2"))
    assert adopted.node_id == BOX2 and adopted.address == ADDRESS and adopted.trust == legacy.trust
    assert _refused(legacy, BOX3, "b3").code == REVOKED
    assert _refused(legacy, None, "e5").code == WRONG_BOX


def test_learned_lists_keep_every_revocation_and_name_but_follow_the_members():
    older = _trust()
    newer = Trust(digest="n", members={BOX1: "box1-renamed"}, revoked={"b2": BOX2})
    merged = Pin(address=ADDRESS, node_id=BOX1, trust=older).learned(newer).trust
    assert merged.digest == "n" and merged.members == {BOX1: "box1-renamed"}
    assert merged.revoked == {"b3old": BOX3, "b3": BOX3, "b2": BOX2}     # a newer list cannot undo one
    assert merged.names[BOX2] == "box2" and merged.names[BOX1] == "box1-renamed"
    assert merged.removed(BOX2) and not merged.removed(BOX1)


def test_the_digest_follows_the_lists_not_their_order():
    a = digest_of({BOX1: "box1", BOX2: "box2"}, {"b3": BOX3})
    assert a == digest_of({BOX2: "box2", BOX1: "box1"}, {"b3": BOX3})
    assert a != digest_of({BOX1: "box1"}, {"b3": BOX3}) != digest_of({BOX1: "box1", BOX2: "box2"}, {})


def test_lists_are_read_from_an_answer_or_a_saved_login_and_garbage_is_refused():
    answer = {"members": [{"id": BOX1, "name": "box1"}], "revoked": [{"serial": "b3", "node": BOX3}], "trust": "d"}
    trust = Trust.from_json(answer)
    assert (trust.digest, trust.members, trust.revoked) == ("d", {BOX1: "box1"}, {"b3": BOX3})
    assert Trust.from_json(trust.to_json()) == trust
    for bad in ([], {"members": "x"}, {"members": [{"id": "not-a-node", "name": "x"}]},
                {"revoked": [{"serial": "XYZ", "node": BOX3}]}, {"members": {BOX1: 5}}, {"digest": 7}):
        with pytest.raises(ValueError):
            Trust.from_json(bad)


def test_a_certificate_s_node_and_serial_are_read_as_revocations_name_them(tmp_path):
    ca, identity = init_cluster(tmp_path / "ca", tmp_path / "tls", "lab", ["127.0.0.1"])
    cert = x509.load_pem_x509_certificate(identity.cert_path.read_bytes())
    seen = presented(cert.public_bytes(Encoding.DER))
    assert seen == Presented(node_id=identity.node_id, serial=identity.serial)
    assert presented(ca.cert.public_bytes(Encoding.DER)).node_id is None      # the CA names no box
