"""Join tokens and members' certificates as replicated records (pure: ClusterState.apply)."""

from __future__ import annotations

import pytest

from floydd.cluster.state.machine import ClusterState
from floydd.cluster.state.credentials import KEEP_SPENT_S, token_state
from floydd.errors import Conflict, InvalidSpec, NotFound, Unauthorized
from floydd.security.tokens import new_token, parse_token, secret_digest

FP = "ab" * 32
T0 = 1_800_000_000.0


def make(state: ClusterState, ttl=600.0, ts=T0, index=1):
    token = new_token(FP, ttl, ts)
    state.apply({"op": "token.create", "id": token.token_id, "secret_sha256": token.secret_sha256,
                 "expires": token.expires_at, "made_by": "ada", "made_on": "a" * 16, "ts": ts}, index=index, term=1)
    return parse_token(token.text)


def use(state, parsed, node="b" * 16, ts=T0 + 1, secret=None, serial="1f"):
    return state.apply({"op": "token.use", "id": parsed.token_id, "node": node, "serial": serial,
                        "secret_sha256": secret_digest(parsed.token_id, secret or parsed.secret),
                        "not_after": ts + 3600, "ts": ts}, index=2, term=1)


def test_a_token_is_redeemed_once_and_records_the_certificate():
    state = ClusterState()
    parsed = make(state)
    record = use(state, parsed)
    assert record["used_by"] == "b" * 16 and "secret_sha256" not in record
    assert state.trust.certs["b" * 16]["serial"] == "1f"
    with pytest.raises(Unauthorized) as err:
        use(state, parsed, node="c" * 16)
    assert err.value.code == "join_token_used"
    assert "c" * 16 not in state.trust.certs


def test_wrong_secret_unknown_id_expiry_and_revocation_are_refused_without_using_it():
    state = ClusterState()
    parsed = make(state, ttl=60)
    with pytest.raises(Unauthorized) as err:
        use(state, parsed, secret="0" * 32)
    assert err.value.code == "join_token_invalid"
    with pytest.raises(Unauthorized) as err:
        use(state, parsed, ts=T0 + 60)
    assert err.value.code == "join_token_expired"
    assert state.trust.tokens[parsed.token_id]["used"] is None
    state.apply({"op": "token.revoke", "id": parsed.token_id, "by": "ada", "ts": T0 + 2}, index=3, term=1)
    with pytest.raises(Unauthorized) as err:
        use(state, parsed, ts=T0 + 3)
    assert err.value.code == "join_token_revoked"
    with pytest.raises(NotFound):
        state.apply({"op": "token.revoke", "id": "f" * 16, "ts": T0}, index=4, term=1)


def test_a_used_token_cannot_be_revoked_and_says_what_to_do():
    state = ClusterState()
    parsed = make(state)
    use(state, parsed)
    with pytest.raises(Conflict) as err:
        state.apply({"op": "token.revoke", "id": parsed.token_id, "ts": T0 + 5}, index=3, term=1)
    assert "floydd remove" in err.value.hint


def test_a_node_id_with_a_certificate_is_not_admitted_twice():
    state = ClusterState()
    use(state, make(state))
    with pytest.raises(Conflict) as err:
        use(state, make(state, index=3), ts=T0 + 2)
    assert err.value.code == "node_id_taken"


def test_listing_never_shows_a_digest_and_states_follow_the_clock():
    state = ClusterState()
    a, b = make(state, ttl=10), make(state, ttl=1000)
    use(state, b)
    listed = {t["id"]: t for t in state.query("tokens")}
    assert all("secret_sha256" not in t for t in listed.values())
    assert token_state(listed[a.token_id], T0 + 5) == "valid"
    assert token_state(listed[a.token_id], T0 + 10) == "expired"
    assert token_state(listed[b.token_id], T0 + 5) == "used"


def test_spent_tokens_are_forgotten_after_a_week_and_snapshots_keep_the_records():
    state = ClusterState()
    old = make(state, ttl=10)
    kept = make(state, ttl=600)
    copy = ClusterState()
    copy.restore(state.snapshot())
    assert set(copy.trust.tokens) == {old.token_id, kept.token_id}
    make(state, ts=T0 + 10 + KEEP_SPENT_S + 1)
    assert old.token_id not in state.trust.tokens


def test_a_malformed_record_is_refused():
    state = ClusterState()
    with pytest.raises(InvalidSpec):
        state.apply({"op": "token.create", "id": "xyz", "secret_sha256": "0" * 64, "expires": T0 + 5, "ts": T0},
                    index=1, term=1)
    with pytest.raises(InvalidSpec):
        state.apply({"op": "token.create", "id": "a" * 16, "secret_sha256": "0" * 64, "expires": T0 + 40 * 86400,
                     "ts": T0}, index=1, term=1)


def test_a_renewed_certificate_keeps_the_previous_one_accepted():
    state = ClusterState()
    nid = "b" * 16
    state.apply({"op": "node.upsert", "id": nid, "name": "b", "address": "10.0.0.2", "cluster_port": 7654,
                 "ts": T0}, index=1, term=1)
    with pytest.raises(NotFound):
        state.apply({"op": "node.cert", "id": "c" * 16, "serial": "aa", "not_after": T0 + 60, "ts": T0},
                    index=2, term=1)
    for index, serial in enumerate(("aa", "bb", "cc"), start=2):
        state.apply({"op": "node.cert", "id": nid, "serial": serial, "not_after": T0 + index, "ts": T0},
                    index=index, term=1)
    assert state.trust.certs[nid]["serial"] == "cc" and state.trust.certs[nid]["previous"]["serial"] == "bb"
    assert state.trust.cert_accepted(nid, "cc") and state.trust.cert_accepted(nid, "bb")
    assert state.trust.cert_accepted(nid, "aa") is False
    assert state.trust.cert_accepted("d" * 16, "aa") is None
