"""Join tokens: printable shape, hashed at rest, one use, expiry, revocation."""

from __future__ import annotations

import logging
import os
import re
import stat

import pytest

from floydd.errors import InvalidSpec, NotFound, Unauthorized
from floydd.security.tokens import TOKEN_SHAPE, TokenStore, parse_token

FP = "ab" * 32


@pytest.fixture
def store(tmp_path, clock) -> TokenStore:
    return TokenStore(tmp_path / "tokens.db", ca_fingerprint=FP, clock=clock)


def test_a_token_carries_the_ca_fingerprint_and_parses_back(store):
    text = store.create(600)
    assert re.fullmatch(r"FLD1\.[0-9a-f]{64}\.[0-9a-f]{16}\.[0-9a-f]{32}", text)
    parsed = parse_token(text)
    assert parsed.ca_fingerprint == FP and parsed.address is None
    assert text == f"FLD1.{FP}.{parsed.token_id}.{parsed.secret}"
    assert parsed.secret not in repr(parsed) and parsed.token_id in repr(parsed)


@pytest.mark.parametrize("address", ["192.168.1.20:7443", "[fe80::1]:7443", "gpu-box.lab:7443"])
def test_an_address_hint_rides_along(store, address):
    parsed = parse_token(store.create(600, address=address))
    assert parsed.address == address


def test_a_token_pasted_with_line_breaks_still_parses(store):
    text = store.create(600)
    assert parse_token(f"  {text[:70]}\n{text[70:]}\n") == parse_token(text)


@pytest.mark.parametrize("text", ["", "hello", "K10abc::server:secret", f"FLD1.{FP}.0123456789abcdef",
                                  f"FLD1.{FP[:-2]}.0123456789abcdef.{'c' * 32}",
                                  f"FLD2.{FP}.0123456789abcdef.{'c' * 32}",
                                  f"FLD1.{FP}.0123456789abcdef.{'C' * 32}"])
def test_malformed_tokens_say_what_the_shape_is(text):
    with pytest.raises(InvalidSpec) as err:
        parse_token(text)
    assert TOKEN_SHAPE in err.value.hint
    assert "c" * 32 not in str(err.value) + err.value.hint


def test_the_store_is_owner_only_and_keeps_no_secret(tmp_path, store):
    text = store.create(600)
    secret = parse_token(text).secret
    path = tmp_path / "tokens.db"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert secret.encode() not in path.read_bytes()
    assert parse_token(text).token_id.encode() in path.read_bytes()


def test_a_token_works_once(store):
    parsed = parse_token(store.create(600))
    store.redeem(parsed.token_id, parsed.secret, node_id="0123456789abcdef")
    with pytest.raises(Unauthorized, match="join token already used") as err:
        store.redeem(parsed.token_id, parsed.secret)
    assert "floydd token create" in err.value.hint
    [info] = store.list()
    assert info.used_by == "0123456789abcdef" and info.state(0) == "used"


def test_an_expired_token_is_refused(store, clock):
    parsed = parse_token(store.create(60))
    clock.now += 60
    with pytest.raises(Unauthorized, match="join token expired") as err:
        store.redeem(parsed.token_id, parsed.secret)
    assert err.value.hint == "make a new one with floydd token create"
    assert store.list()[0].state(clock.now) == "expired"


def test_a_token_just_before_expiry_still_works(store, clock):
    parsed = parse_token(store.create(60))
    clock.now += 59.9
    store.redeem(parsed.token_id, parsed.secret)


def test_wrong_secret_or_unknown_id_is_refused_without_using_the_token(store):
    parsed = parse_token(store.create(600))
    with pytest.raises(Unauthorized, match="not recognised"):
        store.redeem(parsed.token_id, "0" * 32)
    with pytest.raises(Unauthorized, match="not recognised"):
        store.redeem("f" * 16, parsed.secret)
    with pytest.raises(Unauthorized, match="not recognised"):
        store.redeem("'; DROP TABLE join_tokens; --", parsed.secret)
    store.redeem(parsed.token_id, parsed.secret)  # still good after the failed tries


def test_revoke_and_prune(store, clock):
    a, b = parse_token(store.create(600)), parse_token(store.create(600))
    store.revoke(a.token_id)
    with pytest.raises(Unauthorized, match="revoked"):
        store.redeem(a.token_id, a.secret)
    with pytest.raises(NotFound):
        store.revoke("0" * 16)
    assert {i.token_id: i.state(clock.now) for i in store.list()} == {a.token_id: "revoked", b.token_id: "valid"}
    assert store.prune() == 1
    assert [i.token_id for i in store.list()] == [b.token_id]


def test_ttl_must_be_sensible(store):
    for ttl in (0, -5, 10**9):
        with pytest.raises(InvalidSpec, match="lifetime"):
            store.create(ttl)


def test_a_store_others_can_read_is_refused(tmp_path, store):
    os.chmod(tmp_path / "tokens.db", 0o644)
    with pytest.raises(Exception, match="readable by others"):
        TokenStore(tmp_path / "tokens.db", ca_fingerprint=FP)


def test_no_secret_reaches_the_log(store, caplog):
    caplog.set_level(logging.DEBUG, logger="floydd")
    parsed = parse_token(store.create(600))
    store.redeem(parsed.token_id, parsed.secret)
    with pytest.raises(Unauthorized):
        store.redeem(parsed.token_id, parsed.secret)
    assert caplog.records and parsed.secret not in caplog.text
