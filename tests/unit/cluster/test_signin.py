"""A box acts only for the people signed in on it (floydd.cluster.state.signin), on a real replicated
state, no I/O: accounts (uid maps, login names on listed boxes), personal token signatures,
a box's own work, the level-3 switch, and what removing people and cancelling joins do."""

from __future__ import annotations

import pytest

from floydd.cluster.state import commands, people, versions
from floydd.cluster.state.apitokens import new_api_token, parse_api_token
from floydd.cluster.state.authz import authorize_conf, standing
from floydd.cluster.net.presented import PresentedToken, presenting, signed
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, Forbidden, NotFound, Unauthorized
from floydd.security.token_keys import sign_command, signing_key
from floydd.security.tokens import new_token, secret_digest

TERM = 5
A, B, C, D = "a" * 16, "b" * 16, "c" * 16, "d" * 16
T0 = 1_800_000_000.0
FP = "ab" * 32


def upsert(nid):
    return {"op": "node.upsert", "id": nid, "name": f"box-{nid[0]}", "address": "10.0.0.1", "cluster_port": 7654,
            "resources": {"gpus": [0, 1]}, "labels": versions.labels()}


class Lab:
    """Boxes A, B, C at ``level``; root (the first admin) ran floydd init on A; alice uses B
    (her job m/1 runs there); bob uses C. At level 3 each is signed in only there."""

    def __init__(self, level=3):
        self.state = ClusterState(protocol=level)
        self.index, self.ts = 0, T0
        for nid in (A, B, C):
            self.apply(upsert(nid), nid)
        self.apply({"op": "admin.grant", "user": "root", "term": TERM}, A)
        for name, box in (("alice", B), ("bob", C)):
            self.apply({"op": "person.add", "name": name, "role": "user", "user": "root",
                        **({"boxes": [box]} if level >= 3 else {})}, A)
        self.apply({"op": "job.submit", "idem_key": "k1", "project": "m", "spec": {"command": "x"}, "origin": B,
                    "user": "alice"}, B)
        self.apply({"op": "job.place", "job": "m/1", "node": B, "gpus": [0], "term": TERM}, A)
        self.apply({"op": "job.update", "job": "m/1", "attempt": 1, "node": B, "state": "running"}, B)

    def full(self, cmd, proposer):
        self.index += 1
        self.ts += 1.0
        return commands.check({"ts": self.ts, **cmd, "proposer": proposer})

    def apply(self, cmd, proposer):
        full = self.full(cmd, proposer)
        return self.state.apply(full, index=self.index, term=TERM)

    def token(self, person="alice", on=B, expires=None, with_key=True):
        """A personal token for ``person`` made through box ``on`` (where they are signed in)."""
        new = new_api_token()
        cmd = {"op": "apitoken.create", "id": new.token_id, "person": person, "secret_sha256": new.secret_sha256,
               "expires": expires, "label": "laptop", "user": person}
        if with_key:
            cmd["public_key"] = new.public_key
        self.apply(cmd, on)
        return parse_api_token(new.text)


def refused(lab, cmd, proposer) -> Forbidden:
    before = lab.state.snapshot()
    with pytest.raises(Forbidden) as info:
        lab.apply(cmd, proposer)
    assert lab.state.snapshot() == before, "a refused command changes nothing"
    return info.value


def signed_by(lab, cmd, token, proposer, *, for_node=None):
    """``cmd`` as ``proposer`` stamps it, signed with ``token``'s key as box ``for_node`` would."""
    token_id, secret = token
    full = {"ts": lab.ts + 1.0, **cmd}
    if at3(lab):
        full["v"] = versions.PROTOCOL
    sig = sign_command(signing_key(token_id, secret), full, for_node or proposer)
    return {**full, "auth": {"token": token_id, "sig": sig}}


def at3(lab):
    return versions.at_least(lab.state, 3)


STOP = {"op": "job.update", "job": "m/1", "stop_requested": "mine", "user": "alice"}


def test_a_box_may_not_act_for_people_not_signed_in_on_it():
    lab = Lab()
    err = refused(lab, STOP, C)
    assert str(err) == "box-c may not act for alice (job.update): alice is not signed in on box-c"
    assert err.code == "not_signed_in" and err.status == 403
    assert "floydd user map alice box-c" in err.hint
    # making bob an admin "as root", a token for root with a secret the box chose, a join token "by root"
    for cmd in ({"op": "person.role", "name": "bob", "role": "admin", "user": "root"},
                {"op": "apitoken.create", "id": "e" * 16, "person": "root", "secret_sha256": "f" * 64,
                 "user": "root"},
                {"op": "token.create", "id": "e" * 16, "secret_sha256": "f" * 64, "expires": T0 + 600,
                 "made_by": "root", "made_on": C},
                {"op": "node.remove", "id": B, "user": "root"},
                {"op": "job.delete", "job": "m/1", "user": "root"}):
        assert "root is not signed in on box-c" in str(refused(lab, cmd, C))
    assert "nobody has no account" not in str(refused(lab, {**STOP, "user": "nobody"}, B))   # the op's rule first
    assert lab.state.admins == ["root"] and lab.state.apitokens.tokens == {} and lab.state.trust.tokens == {}


def test_signed_in_by_a_uid_map_by_listed_boxes_or_every_box():
    lab = Lab()
    lab.apply(STOP, B)                                               # her login name acts on B
    assert lab.state.jobs["m/1"].stop_requested == "mine"
    lab.apply({"op": "person.map", "name": "bob", "node": A, "uids": [1003], "user": "root"}, A)
    lab.apply({"op": "dataset.add_version", "name": "d", "tree": "ab" * 16, "node": A, "user": "bob"}, A)
    refused(lab, {"op": "dataset.add_version", "name": "e", "tree": "ab" * 16, "node": A, "user": "alice"}, A)
    lab.apply({"op": "person.boxes", "name": "alice", "node": A, "on": True, "user": "root"}, A)
    lab.apply({"op": "dataset.add_version", "name": "e", "tree": "ab" * 16, "node": A, "user": "alice"}, A)
    refused(lab, {"op": "job.submit", "idem_key": "k9", "project": "m", "spec": {"command": "x"}, "origin": C,
                  "user": "root"}, C)
    lab.apply({"op": "person.boxes", "name": "root", "every_box": True, "on": True, "user": "root"}, A)
    lab.apply({"op": "job.submit", "idem_key": "k9", "project": "m", "spec": {"command": "x"}, "origin": C,
               "user": "root"}, C)
    lab.apply({"op": "person.boxes", "name": "alice", "node": B, "on": False, "user": "root"}, A)
    assert "alice is not signed in on box-b" in str(refused(lab, STOP, B))
    assert people.listing(lab.state.people)[0]["boxes"] == [A]


def test_a_personal_token_presented_to_a_box_signs_for_its_person_there_only():
    lab = Lab()
    token = lab.token("alice")
    lab.apply(signed_by(lab, STOP, token, C), C)                     # presented to C: C may act for her
    assert lab.state.jobs["m/1"].stop_requested == "mine"
    again = {**STOP, "stop_requested": "again"}
    err = refused(lab, signed_by(lab, again, token, C, for_node=B), C)     # made for B, sent through C
    assert "signature of alice's personal token" in str(err) and "does not match" in str(err)
    forged = signed_by(lab, again, token, C)
    forged["stop_requested"] = "changed after signing"
    assert "does not match" in str(refused(lab, forged, C))
    other = lab.token("bob", on=C)
    by_bob = signed_by(lab, again, other, C)
    under_hers = {**by_bob, "auth": {"token": token[0], "sig": by_bob["auth"]["sig"]}}
    assert "does not match" in str(refused(lab, under_hers, C))     # bob's key under alice's token id
    assert f"({other[0]}) is not alice's" in str(refused(lab, signed_by(lab, again, other, C), C))


def test_expired_revoked_and_old_tokens_back_nothing():
    lab = Lab()
    short = lab.token("alice", expires=lab.ts + 3.0)
    lab.ts += 10
    assert "was expired" in str(refused(lab, signed_by(lab, STOP, short, C), C))
    revoked = lab.token("alice")
    lab.apply({"op": "apitoken.revoke", "id": revoked[0], "user": "alice"}, B)
    assert "was revoked" in str(refused(lab, signed_by(lab, STOP, revoked, C), C))
    old = lab.token("alice", with_key=False)                         # made before level 3: no key recorded
    err = refused(lab, signed_by(lab, STOP, old, C), C)
    assert "was made before floydd 0.3: it cannot back a change there" in str(err)
    assert "make a new personal token" in err.hint


def test_at_level_2_and_in_a_lab_of_one_a_box_names_anyone():
    lab = Lab(level=2)
    lab.apply(STOP, C)                                               # the old behaviour, until every box is 0.3
    assert lab.state.jobs["m/1"].stop_requested == "mine"
    alone = ClusterState(protocol=3)
    alone.apply(commands.check({**upsert(A), "ts": T0, "proposer": A}), index=1, term=1)
    alone.apply(commands.check({"op": "job.submit", "idem_key": "k", "project": "m", "spec": {"command": "x"},
                                "user": "anyone", "ts": T0, "proposer": A}), index=2, term=1)


def test_a_box_running_a_job_adds_and_drops_its_output_versions_for_its_owner():
    lab = Lab()
    lab.apply({"op": "person.boxes", "name": "alice", "node": B, "on": False, "user": "root"}, A)
    out = {"op": "dataset.add_version", "name": "m/1/output", "tree": "ab" * 16, "node": B, "user": "alice"}
    lab.apply(out, B)                                                # a checkpoint of the job running on B
    lab.apply({**out, "tree": "cd" * 16}, B)
    lab.apply({"op": "dataset.delete", "name": "m/1/output", "version": 1, "user": "alice"}, B)
    refused(lab, {**out, "node": C}, C)                              # C runs no part of m/1
    refused(lab, {"op": "dataset.delete", "name": "m/1/output", "user": "alice"}, B)   # all of it: hers to say
    refused(lab, {**out, "name": "m/2/output"}, B)
    assert sorted(lab.state.datasets["m/1/output"]["versions"]) == ["2"]


def test_membership_changes_for_an_admin_need_the_admin_signed_in_on_the_proposer():
    lab = Lab()
    cmd = {"op": commands.CONF_OP, "change": "remove", "node": B, "user": "root"}
    with pytest.raises(Forbidden, match="root is not signed in on box-c"):
        authorize_conf(lab.state, cmd, C, A)
    authorize_conf(lab.state, cmd, A, A)
    token = lab.token("root", on=A)
    conf = {**cmd, "ts": lab.ts}
    conf["auth"] = {"token": token[0], "sig": sign_command(signing_key(*token), conf, C)}
    authorize_conf(lab.state, conf, C, A)
    with pytest.raises(Forbidden, match="does not match"):
        authorize_conf(lab.state, conf, B, A)


def test_level_3_lists_the_members_then_for_everyone_and_revokes_removed_people_s_tokens():
    lab = Lab(level=2)
    gone = lab.token("bob", on=C, with_key=False)
    lab.apply({"op": "person.remove", "name": "bob", "user": "root"}, A)
    assert lab.state.apitokens.tokens[gone[0]]["revoked"] is None    # level 2 kept them (the old hole)
    join = make_join(lab, A)
    lab.apply({"op": "cluster.protocol", "level": 3}, A)
    assert {n: (p["boxes"], p["every_box"]) for n, p in lab.state.people.items()} == \
        {"root": ([A, B, C], False), "alice": ([A, B, C], False)}
    assert lab.state.apitokens.tokens[gone[0]]["revoked"] == lab.ts
    assert lab.state.trust.tokens[join.token_id]["sign_in"] == ["root"]
    lab.apply(upsert(D), D)                                          # a box that joins later acts for nobody
    assert "alice is not signed in on box-d" in str(refused(lab, STOP, D))
    lab.apply(STOP, C)


def test_removing_a_person_revokes_their_tokens_and_adding_them_again_revives_none():
    lab = Lab()
    text = lab.token("bob", on=C)
    lab.apply({"op": "person.remove", "name": "bob", "user": "root"}, A)
    record = lab.state.apitokens.tokens[text[0]]
    assert record["revoked"] == lab.ts and record["revoked_by"] == "root"
    lab.apply({"op": "person.add", "name": "bob", "role": "user", "user": "root"}, A)
    with pytest.raises(Unauthorized, match="was revoked"):
        lab.state.apitokens.person_for(text[0], secret_digest(*text), lab.ts)


def make_join(lab, on, **fields):
    token = new_token(FP, 600, lab.ts)
    lab.apply({"op": "token.create", "id": token.token_id, "secret_sha256": token.secret_sha256,
               "expires": token.expires_at, "made_by": "root", "made_on": on, **fields}, on)
    return token


def use_join(lab, token, node, serial="1f"):
    return lab.apply({"op": "token.use", "id": token.token_id, "node": node, "serial": serial,
                      "secret_sha256": token.secret_sha256, "not_after": lab.ts + 3600}, A)


def test_a_join_token_signs_in_its_maker_or_whom_it_names_on_the_box_it_admits():
    lab = Lab()
    use_join(lab, make_join(lab, A), D)
    assert people.signed_in(lab.state.people, D, "root") and not people.signed_in(lab.state.people, D, "alice")
    use_join(lab, make_join(lab, A, sign_in=["alice", "bob"]), "e" * 16, serial="2f")
    assert [n for n in ("root", "alice", "bob") if people.signed_in(lab.state.people, "e" * 16, n)] == ["alice", "bob"]
    use_join(lab, make_join(lab, A, sign_in=[]), "f" * 16, serial="3f")
    assert not any(people.signed_in(lab.state.people, "f" * 16, n) for n in lab.state.people)
    with pytest.raises(NotFound, match="mallory has no account in this lab"):
        make_join(lab, A, sign_in=["mallory"])


def test_revoking_a_used_token_cancels_the_join_and_the_box_never_becomes_a_member():
    lab = Lab()
    token = make_join(lab, A)
    use_join(lab, token, D, serial="4f")
    answer = lab.apply({"op": "token.revoke", "id": token.token_id, "by": "root"}, A)
    assert answer["cancelled_join"] == D and D in lab.state.removed and "4f" in lab.state.revoked
    assert standing(lab.state, (), D, "4f") is None                  # refused on every connection
    err = refused(lab, {**upsert(D), "rejoin": True}, D)
    assert err.code == "join_cancelled" and "join again" in err.hint
    again = make_join(lab, A)                                        # a new join with a new certificate may
    use_join(lab, again, D, serial="5f")
    lab.apply({**upsert(D), "rejoin": True}, D)
    assert D in lab.state.nodes and D not in lab.state.removed
    with pytest.raises(Conflict, match="a member now"):
        lab.apply({"op": "token.revoke", "id": again.token_id, "by": "root"}, A)


def test_a_redeemed_join_is_cancelled_by_node_remove_too():
    lab = Lab()
    use_join(lab, make_join(lab, A), D, serial="6f")
    lab.apply({"op": "node.remove", "id": D, "user": "root"}, A)
    assert "6f" in lab.state.revoked and standing(lab.state, (), D, "6f") is None
    assert refused(lab, {**upsert(D), "rejoin": True}, D).code == "join_cancelled"


def test_every_op_made_for_a_person_may_carry_a_signature_from_level_3_only():
    for op in commands.PERSON_OPS - versions._NEW_OPS[3]:
        assert "auth" in versions._NEW_FIELDS[3].get(op, ()), f"{op}: auth is not registered as a level-3 field"
    lab = Lab(level=2)
    with pytest.raises(Conflict, match="needs every box of the cluster on floydd 0.3"):
        lab.apply({**STOP, "auth": {"token": "0" * 16, "sig": "00"}}, B)


def test_the_proposing_box_signs_for_the_presented_token_and_refuses_early():
    lab = Lab()
    token = lab.token("alice")
    cmd = {**STOP, "ts": lab.ts + 1.0, "v": versions.PROTOCOL}
    with pytest.raises(Forbidden, match="alice is not signed in on box-c"):
        signed(lab.state, cmd, C)                                    # no token presented
    with presenting(PresentedToken(token_id=token[0], person="alice", secret=token[1])):
        out = signed(lab.state, cmd, C)
        assert out["auth"]["token"] == token[0]
        assert "auth" not in signed(lab.state, {**cmd, "user": "root", "job": "m/1"}, A)   # not the token's person
    lab.apply(out, C)
    assert lab.state.jobs["m/1"].stop_requested == "mine"
    old = lab.token("alice", with_key=False)
    with presenting(PresentedToken(token_id=old[0], person="alice", secret=old[1])):
        with pytest.raises(Forbidden, match="made before floydd 0.3"):
            signed(lab.state, cmd, C)
    assert repr(PresentedToken(token_id="x", person="p", secret="s3cret")).count("s3cret") == 0
