"""The lab's people (floydd.cluster.state.people) and who may change them (floydd.cluster.state.authz), on a
real replicated state, no I/O."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.cluster.state import commands, people
from floydd.cluster.state.authz import is_admin, may_read_dataset
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, Forbidden, InvalidName, InvalidSpec, NotFound

A, B = "a" * 16, "b" * 16
TREE = "0123456789abcdef"


class Lab:
    def __init__(self):
        self.state, self.index = ClusterState(protocol=2), 0

    def apply(self, cmd, proposer=A):
        self.index += 1
        full = {"ts": float(self.index), **cmd, "proposer": proposer}
        return self.state.apply(commands.check(full), index=self.index, term=1)

    def add(self, name, role="user", by="root", **kw):
        return self.apply({"op": "person.add", "name": name, "role": role, "user": by, **kw})


def refused(lab, cmd, kind=Forbidden):
    before = lab.state.snapshot()
    with pytest.raises(kind) as info:
        lab.apply(cmd)
    assert lab.state.snapshot() == before, "a refused command changes nothing"
    return info.value


def test_a_lab_of_one_adding_its_first_person_becomes_its_admin():
    lab = Lab()
    assert is_admin(lab.state, "anyone")                  # no people: the lone box's user is its admin
    assert lab.add("bob", by="alice")["role"] == "user"
    assert lab.state.people["alice"]["role"] == "admin" and lab.state.admins == ["alice"]
    assert not is_admin(lab.state, "bob") and not is_admin(lab.state, "carol") and is_admin(lab.state, "alice")


def test_the_first_person_is_an_admin_whatever_was_asked():
    lab = Lab()
    assert lab.add("alice", role="user", by="alice")["role"] == "admin"
    assert lab.state.admins == ["alice"]


def test_only_admins_change_people_with_clear_errors():
    lab = Lab()
    lab.add("bob", by="root")
    err = refused(lab, {"op": "person.add", "name": "carol", "role": "admin", "user": "bob"})
    assert str(err) == "user bob may not add carol: not an admin" and err.code == "not_an_admin"
    assert "an unnamed user may not remove bob" in str(refused(lab, {"op": "person.remove", "name": "bob"}))
    refused(lab, {"op": "person.role", "name": "bob", "role": "admin", "user": "bob"})
    refused(lab, {"op": "person.map", "name": "bob", "node": A, "uids": [1001], "user": "bob"})
    lab.apply({"op": "person.role", "name": "bob", "role": "admin", "user": "root"})
    assert lab.state.admins == ["bob", "root"]


def test_the_last_admin_can_be_neither_demoted_nor_removed():
    lab = Lab()
    lab.add("bob", by="root")
    err = refused(lab, {"op": "person.role", "name": "root", "role": "user", "user": "root"}, Conflict)
    assert err.code == "last_admin" and "last admin" in str(err)
    assert refused(lab, {"op": "person.remove", "name": "root", "user": "root"}, Conflict).code == "last_admin"
    lab.apply({"op": "person.role", "name": "bob", "role": "admin", "user": "root"})
    lab.apply({"op": "person.remove", "name": "root", "user": "bob"})
    assert lab.state.admins == ["bob"] and "root" not in lab.state.people


def test_unknown_people_bad_names_roles_and_duplicates():
    lab = Lab()
    lab.add("bob", by="root")
    assert refused(lab, {"op": "person.remove", "name": "zed", "user": "root"}, NotFound).code == "person_not_found"
    assert refused(lab, {"op": "person.add", "name": "bob", "role": "user", "user": "root"}, Conflict).code \
        == "person_exists"
    refused(lab, {"op": "person.add", "name": "../x", "role": "user", "user": "root"}, InvalidName)
    refused(lab, {"op": "person.add", "name": "eve", "role": "god", "user": "root"}, InvalidSpec)
    refused(lab, {"op": "person.map", "name": "bob", "node": A, "uids": [-1], "user": "root"}, InvalidSpec)


def test_uids_map_people_per_box_with_the_login_name_as_default():
    lab = Lab()
    lab.add("alice", by="root", uids={A: [2001]})
    lab.add("bob", by="root")
    ppl = lab.state.people
    assert people.person_of(ppl, A, 2001, "whoever") == "alice"       # mapped on A
    assert people.person_of(ppl, A, 1000, "alice") is None            # alice maps other uids on A
    assert people.person_of(ppl, B, 1000, "alice") == "alice"         # on B her login name is her
    assert people.person_of(ppl, A, 1001, "bob") == "bob"
    assert people.person_of(ppl, A, 1003, "carol") is None and people.person_of(ppl, A, 1003, None) is None
    err = refused(lab, {"op": "person.map", "name": "bob", "node": A, "uids": [2001], "user": "root"}, Conflict)
    assert err.code == "uid_taken" and "already acts as alice" in str(err)
    lab.apply({"op": "person.map", "name": "alice", "node": A, "uids": [], "user": "root"})
    assert people.person_of(lab.state.people, A, 1000, "alice") == "alice"


def test_people_survive_a_snapshot_and_13a_admins_are_migrated():
    lab = Lab()
    lab.add("bob", by="root", uids={B: [1005]})
    restored = ClusterState(protocol=2)
    restored.restore(lab.state.snapshot())
    assert restored.people == lab.state.people
    old = msgpack.unpackb(lab.state.snapshot(), raw=False)
    del old["people"]
    old["admins"] = ["root", "ops"]
    restored.restore(msgpack.packb(old, use_bin_type=True))
    assert restored.admins == ["ops", "root"] and set(restored.people) == {"ops", "root"}


def test_admin_grant_of_init_records_a_person():
    lab = Lab()
    lab.apply({"op": "admin.grant", "user": "alice", "term": 1})
    assert people.listing(lab.state.people)[0] | {"added": 0} == {"name": "alice", "role": "admin", "uids": {},
                                                                   "added": 0, "by": ""}


def test_private_datasets_are_for_their_owner_and_admins():
    lab = Lab()
    lab.add("alice", by="root")
    lab.add("bob", by="root")
    v = lab.apply({"op": "dataset.add_version", "name": "faces", "tree": TREE, "node": A, "user": "alice",
                   "visibility": "private"})
    assert (v["owner"], v["visibility"]) == ("alice", "private")
    ds = lab.state.datasets["faces"]
    assert may_read_dataset(lab.state, "alice", ds) and may_read_dataset(lab.state, "root", ds)
    assert not may_read_dataset(lab.state, "bob", ds)
    err = refused(lab, {"op": "dataset.add_version", "name": "faces", "tree": TREE, "node": A, "user": "bob"})
    assert err.code == "private_dataset" and "alice's private dataset" in str(err)
    refused(lab, {"op": "dataset.delete", "name": "faces", "user": "bob"})
    lab.apply({"op": "dataset.add_version", "name": "faces", "tree": TREE, "node": A, "user": "alice",
               "visibility": "lab"})
    assert all(v["visibility"] == "lab" for v in lab.state.datasets["faces"]["versions"].values())
    assert may_read_dataset(lab.state, "bob", lab.state.datasets["faces"])
    err = refused(lab, {"op": "dataset.add_version", "name": "faces", "tree": TREE, "node": A, "user": "bob",
                        "visibility": "private"})
    assert err.code == "not_the_owner"
    with pytest.raises(InvalidSpec, match="not a visibility"):
        commands.check({"op": "dataset.add_version", "name": "x", "tree": TREE, "ts": 1.0, "visibility": "secret"})


_NAMES = st.sampled_from(["root", "alice", "bob", "carol"])
_CMDS = st.one_of(
    st.builds(lambda n, r, u: {"op": "person.add", "name": n, "role": r, "user": u}, _NAMES,
              st.sampled_from(people.ROLES), _NAMES),
    st.builds(lambda n, r, u: {"op": "person.role", "name": n, "role": r, "user": u}, _NAMES,
              st.sampled_from(people.ROLES), _NAMES),
    st.builds(lambda n, u: {"op": "person.remove", "name": n, "user": u}, _NAMES, _NAMES),
    st.builds(lambda n, u, uid: {"op": "person.map", "name": n, "node": A, "uids": [uid], "user": u},
              _NAMES, _NAMES, st.integers(1000, 1003)))


@settings(max_examples=150, deadline=None)
@given(st.lists(_CMDS, max_size=25))
def test_a_lab_with_people_always_has_an_admin_and_only_admins_change_it(cmds):
    lab = Lab()
    for cmd in cmds:
        was_admin = is_admin(lab.state, cmd["user"])
        before = lab.state.snapshot()
        try:
            lab.apply(cmd)
        except (Forbidden, Conflict, NotFound):
            assert lab.state.snapshot() == before
        else:
            assert was_admin, "a change to people came from an admin (or the lab of one)"
        assert not lab.state.people or lab.state.admins
        uids = [(n, u) for p in lab.state.people.values() for n, us in p["uids"].items() for u in us]
        assert len(uids) == len(set(uids)), "a uid acts as one person on a box"


def test_only_admins_make_or_revoke_join_tokens_once_the_lab_has_people():
    lab = Lab()
    token = {"op": "token.create", "id": "c" * 16, "secret_sha256": "0" * 64, "expires": 3600.0}
    lab.apply({**token, "made_by": "anyone"})                 # a lab of none: its only user's
    lab.add("bob", by="root")                                  # root (admin) and bob (user)
    err = refused(lab, {**token, "id": "d" * 16, "made_by": "bob"})
    assert str(err) == "user bob may not make join tokens: not an admin" and err.code == "not_an_admin"
    assert "may not revoke join tokens" in str(refused(lab, {"op": "token.revoke", "id": "c" * 16, "by": "bob"}))
    lab.apply({**token, "id": "d" * 16, "made_by": "root"})
    lab.apply({"op": "token.revoke", "id": "d" * 16, "by": "root"})
    lab.apply({**token, "id": "e" * 16, "made_by": "imported"})  # a box's own old tokens.db, on upgrade
