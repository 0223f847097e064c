"""A personal token's signing key (floydd.security.token_keys): derived, never stored; a
signature binds the command and the box that proposed it."""

from __future__ import annotations

from floydd.cluster.state.apitokens import new_api_token, parse_api_token
from floydd.security.token_keys import command_message, public_key_hex, sign_command, signing_key, verify_command

CMD = {"op": "job.update", "job": "m/1", "stop_requested": "mine", "user": "alice", "ts": 1.5, "v": 3}
A, B = "a" * 16, "b" * 16


def test_the_key_is_derived_from_the_secret_alone_and_matches_what_the_cluster_records():
    new = new_api_token()
    token_id, secret = parse_api_token(new.text)
    assert public_key_hex(signing_key(token_id, secret)) == new.public_key       # the same on every box
    assert public_key_hex(signing_key(token_id, "0" * 32)) != new.public_key
    assert public_key_hex(signing_key("f" * 16, secret)) != new.public_key       # the id is in the derivation
    assert len(new.public_key) == 64 and secret not in repr(new)


def test_a_signature_holds_for_that_command_from_that_box_only():
    new = new_api_token()
    key = signing_key(*parse_api_token(new.text))
    sig = sign_command(key, CMD, A)
    assert verify_command(new.public_key, CMD, A, sig)
    stamped = {**CMD, "proposer": A, "term": 7, "auth": {"token": "x", "sig": sig}}
    assert verify_command(new.public_key, stamped, A, sig)                       # what the leader adds is left out
    assert not verify_command(new.public_key, CMD, B, sig)                       # replayed through another box
    assert not verify_command(new.public_key, {**CMD, "stop_requested": "other"}, A, sig)
    assert not verify_command(new_api_token().public_key, CMD, A, sig)           # another token's key
    assert not verify_command(new.public_key, CMD, A, "zz" * 64)                  # malformed: False, no error
    assert not verify_command("00", CMD, A, sig)


def test_the_message_is_canonical_whatever_the_order_or_the_sequence_type():
    shuffled = dict(reversed(list({**CMD, "parts": (1, 2)}.items())))
    assert command_message(shuffled, A) == command_message({**CMD, "parts": [1, 2]}, A)
