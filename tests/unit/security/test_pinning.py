"""The fingerprints ``floyd login --fingerprint`` takes, and how they are matched."""

from __future__ import annotations

import pytest

from floydd.errors import InvalidSpec
from floydd.security.pinning import matches, parse_fingerprint
from floydd.security.tokens import new_token

FP = "ab" * 32


def test_every_printed_form_names_the_same_ca():
    assert parse_fingerprint(FP) == FP
    assert parse_fingerprint(f"sha256:{FP[:16]}") == FP[:16]            # as floydd init and members print it
    assert parse_fingerprint(f"  SHA256:{FP.upper()}\n") == FP            # pasted with case and spaces
    join = new_token(FP, 600, 0.0, address="10.0.0.5:7654").text
    assert parse_fingerprint(join) == FP                                  # a join token carries it


@pytest.mark.parametrize("text", ["", "sha256:", "abc", "zz" * 32, "sha1:" + FP, FP + "00", "FLD1.garbled"])
def test_anything_else_is_refused_saying_which_shapes_it_takes(text):
    with pytest.raises(InvalidSpec) as refused:
        parse_fingerprint(text)
    assert "fingerprint" in str(refused.value) or "join token" in str(refused.value)


def test_a_prefix_matches_only_its_own_ca_and_only_when_long_enough():
    assert matches(FP, FP) and matches(FP, FP[:16])
    assert not matches(FP, "cd" * 8)
    assert not matches(FP, FP[:15])          # too short to name a CA
    assert not matches("cd" + FP[2:], FP[:16])


def test_the_ca_answer_of_an_older_box_or_with_damaged_lists_still_gives_its_ca():
    import json

    from floydd.security.boxpin import Trust
    from floydd.security.pinning import read_ca_answer
    pem = b"-----BEGIN CERTIFICATE-----\n"
    assert read_ca_answer(pem, "application/x-pem-file") == (pem, Trust())          # a box of 0.2
    members = [{"id": "1" * 16, "name": "box1"}]
    good = json.dumps({"ca": pem.decode(), "members": members, "revoked": [], "trust": "d"}).encode()
    ca, trust = read_ca_answer(good, "application/json; charset=utf-8")
    assert ca == pem and trust.members == {"1" * 16: "box1"} and trust.digest == "d"
    damaged = json.dumps({"ca": pem.decode(), "members": "nonsense", "trust": "d"}).encode()
    assert read_ca_answer(damaged, "application/json") == (pem, Trust())            # the pin holds; lists lost
    assert read_ca_answer(b"{", "application/json") == (b"", Trust())                # no CA: refused by the caller
