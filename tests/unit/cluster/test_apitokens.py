"""Personal API tokens as replicated records (pure: ClusterState.apply and its authz)."""

from __future__ import annotations

import pytest

from floydd.cluster.state.apitokens import KEEP_SPENT_S, api_token_state, new_api_token, parse_api_token
from floydd.cluster.state.commands import check
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, Forbidden, InvalidSpec, NotFound, Unauthorized
from floydd.security.tokens import secret_digest

T0 = 1_800_000_000.0
BOX = "a" * 16


def apply(state, cmd, ts=T0, index=[1]):
    index[0] += 1
    return state.apply({"ts": ts, "proposer": BOX, **cmd}, index=index[0], term=1)


def make(state, person="ada", user=None, ts=T0, expires=None):
    new = new_api_token()
    record = apply(state, {"op": "apitoken.create", "id": new.token_id, "person": person,
                           "secret_sha256": new.secret_sha256, "expires": expires, "label": "laptop",
                           "user": user or person}, ts=ts)
    return new, record


def digest_of(text: str) -> tuple[str, str]:
    token_id, secret = parse_api_token(text)
    return token_id, secret_digest(token_id, secret)


def with_admin(name="ada") -> ClusterState:
    state = ClusterState(protocol=2)
    state.apply({"op": "admin.grant", "user": name, "ts": T0, "term": 1, "proposer": BOX}, index=1, term=1)
    return state


def test_a_token_speaks_for_its_person_until_revoked_and_keeps_no_secret():
    state = ClusterState(protocol=2)
    new, record = make(state)
    assert "secret_sha256" not in record and record["person"] == "ada" and record["made_on"] == BOX
    assert new.text.startswith("FLP1.") and new.text.split(".")[2] not in str(state.apitokens.list())
    assert state.apitokens.person_for(*digest_of(new.text), T0 + 5) == "ada"
    apply(state, {"op": "apitoken.revoke", "id": new.token_id, "user": "ada"}, ts=T0 + 6)
    with pytest.raises(Unauthorized) as err:
        state.apitokens.person_for(*digest_of(new.text), T0 + 7)
    assert err.value.code == "api_token_revoked"
    again = ClusterState(protocol=2)                      # a box restored from a snapshot refuses it too
    again.restore(state.snapshot())
    with pytest.raises(Unauthorized):
        again.apitokens.person_for(*digest_of(new.text), T0 + 7)


def test_a_wrong_secret_an_unknown_id_and_an_expired_token_are_refused():
    state = ClusterState(protocol=2)
    new, _ = make(state, expires=T0 + 60)
    token_id, _digest = digest_of(new.text)
    with pytest.raises(Unauthorized) as err:
        state.apitokens.person_for(token_id, secret_digest(token_id, "0" * 32), T0 + 1)
    assert err.value.code == "api_token_invalid"
    with pytest.raises(Unauthorized):
        state.apitokens.person_for("f" * 16, _digest, T0 + 1)
    with pytest.raises(Unauthorized) as err:
        state.apitokens.person_for(token_id, _digest, T0 + 60)
    assert err.value.code == "api_token_expired"
    with pytest.raises(Unauthorized) as err:
        parse_api_token("FLD1.nope")
    assert "nope" not in err.value.message


def test_people_make_and_revoke_their_own_tokens_admins_anyone_s():
    state = with_admin("ada")
    new, _ = make(state, person="bob")
    with pytest.raises(Forbidden):
        make(state, person="bob", user="eve")
    with pytest.raises(Forbidden):
        apply(state, {"op": "apitoken.revoke", "id": new.token_id, "user": "eve"})
    assert state.apitokens.person_for(*digest_of(new.text), T0 + 1) == "bob"
    make(state, person="bob", user="ada")        # an admin makes one for bob
    record = apply(state, {"op": "apitoken.revoke", "id": new.token_id, "user": "ada"}, ts=T0 + 2)
    assert record["revoked_by"] == "ada" and api_token_state(record, T0 + 3) == "revoked"
    assert [t["person"] for t in state.apitokens.list("bob")] == ["bob", "bob"]


def test_bad_commands_are_refused_and_spent_tokens_are_forgotten():
    state = ClusterState(protocol=2)
    with pytest.raises(InvalidSpec):
        apply(state, {"op": "apitoken.create", "id": "XYZ", "person": "ada", "secret_sha256": "0" * 64})
    with pytest.raises(InvalidSpec):
        check({"op": "apitoken.create", "id": "a" * 16, "person": "ada", "secret_sha256": "0" * 64, "ts": T0,
               "extra": 1})
    with pytest.raises(NotFound):
        apply(state, {"op": "apitoken.revoke", "id": "b" * 16, "user": "ada"})
    new, _ = make(state)
    with pytest.raises(Conflict):
        apply(state, {"op": "apitoken.create", "id": new.token_id, "person": "ada",
                      "secret_sha256": new.secret_sha256})
    apply(state, {"op": "apitoken.revoke", "id": new.token_id, "user": "ada"}, ts=T0 + 1)
    make(state, ts=T0 + KEEP_SPENT_S + 2)
    assert new.token_id not in state.apitokens.tokens and len(state.apitokens.tokens) == 1
