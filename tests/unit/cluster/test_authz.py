"""Who may say what between boxes (floydd.cluster.state.authz), on a real replicated state, no I/O."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.cluster.state import commands
from floydd.cluster.state.authz import authorize, authorize_conf, joining_may_propose, may_act_for, standing
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Forbidden

TERM = 5
A, B, C = "a" * 16, "b" * 16, "c" * 16


def upsert(nid, **kw):
    return {"op": "node.upsert", "id": nid, "name": f"box-{nid[0]}", "address": "10.0.0.1", "cluster_port": 7654,
            "resources": {"gpus": [0, 1]}, **kw}


class Lab:
    """A state with boxes A, B, C; alice's job m/1 running on B; bob's queued job m/2; alice an admin-less
    lab until ``admins`` is given."""

    def __init__(self, admins=()):
        self.state = ClusterState()
        self.index = 0
        for nid in (A, B, C):
            self.apply(upsert(nid), nid)
        for user in admins:
            self.apply({"op": "admin.grant", "user": user, "term": TERM}, A)
        self.apply({"op": "job.submit", "idem_key": "k1", "project": "m", "spec": {"command": "x"}, "origin": A,
                    "user": "alice"}, A)
        self.apply({"op": "job.place", "job": "m/1", "node": B, "gpus": [0], "term": TERM}, A)
        self.apply({"op": "job.update", "job": "m/1", "attempt": 1, "node": B, "state": "running"}, B)
        self.apply({"op": "job.submit", "idem_key": "k2", "project": "m", "spec": {"command": "x"}, "origin": C,
                    "user": "bob"}, C)

    def apply(self, cmd, proposer):
        self.index += 1
        full = {"ts": float(self.index), **cmd, "proposer": proposer}
        return self.state.apply(commands.check(full), index=self.index, term=TERM)


def refused(lab, cmd, proposer) -> Forbidden:
    before = lab.state.snapshot()
    with pytest.raises(Forbidden) as info:
        lab.apply(cmd, proposer)
    assert lab.state.snapshot() == before, "a refused command changes nothing"
    return info.value


def test_a_box_reports_only_its_own_resources_and_health():
    lab = Lab()
    err = refused(lab, upsert(C, resources={"gpus": [0, 1, 2, 3, 4, 5, 6, 7]}), B)
    assert str(err) == "box-b may not report box-c's resources" and err.status == 403
    assert "may not report box-c's health" in str(refused(lab, {"op": "node.health", "id": C, "status": "down"}, B))
    lab.apply({"op": "node.health", "id": B, "status": "up", "usage": {"gpu": 1}}, B)
    assert lab.state.nodes[B]["usage"] == {"gpu": 1}


def test_only_the_leader_marks_a_box_suspect_and_places_and_archives():
    lab = Lab()
    assert "only the leader" in str(refused(lab, {"op": "node.health", "id": C, "status": "suspect"}, B))
    lab.apply({"op": "node.health", "id": C, "status": "suspect", "term": TERM}, A)
    assert lab.state.nodes[C]["status"] == "suspect"
    refused(lab, {"op": "job.archive", "jobs": ["m/1"]}, B)
    refused(lab, {"op": "dataset.holders", "name": "d", "version": 1, "node": C, "holds": False}, A)


def test_a_box_reports_only_runs_placed_on_it():
    lab = Lab()
    err = refused(lab, {"op": "job.update", "job": "m/1", "attempt": 1, "node": B, "state": "failed"}, C)
    assert "box-c may not report on box-b's run of m/1" in str(err)
    err = refused(lab, {"op": "job.update", "job": "m/1", "attempt": 1, "node": C, "state": "failed"}, C)
    assert "it is not placed there" in str(err)
    refused(lab, {"op": "job.update", "job": "m/1", "node": B, "silent": [C], "state": "lost"}, B)
    lab.apply({"op": "job.update", "job": "m/1", "attempt": 1, "node": B, "note": "stopped an old run"}, B)
    assert lab.state.jobs["m/1"].history[-1][1] == "box-b: stopped an old run"    # a stamped note still
    refused(lab, {"op": "job.update", "job": "m/1", "attempt": 1, "node": B, "note": "x"}, C)   # goes alone
    lab.apply({"op": "job.update", "job": "m/1", "attempt": 1, "node": B, "state": "success"}, B)
    assert lab.state.jobs["m/1"].state == "success"


def test_leader_moves_are_fenced_actions():
    lab = Lab()
    refused(lab, {"op": "job.update", "job": "m/1", "state": "unknown", "silent": [B]}, A)   # no term: no
    lab.apply({"op": "job.update", "job": "m/1", "state": "unknown", "silent": [B], "attempt": 1, "term": TERM}, A)
    assert lab.state.jobs["m/1"].state == "unknown"


def test_a_job_submitted_from_another_box_is_refused():
    lab = Lab()
    cmd = {"op": "job.submit", "idem_key": "k3", "project": "m", "spec": {"command": "x"}, "origin": A, "user": "x"}
    assert "as if from box-a" in str(refused(lab, cmd, C))


def test_without_admins_every_user_may_stop_and_delete():
    lab = Lab()
    lab.apply({"op": "job.update", "job": "m/1", "stop_requested": "mine now", "user": "mallory"}, C)
    assert lab.state.jobs["m/1"].stop_requested == "mine now"


def test_with_admins_only_the_owner_or_an_admin_stops_or_deletes():
    lab = Lab(admins=["root"])
    err = refused(lab, {"op": "job.update", "job": "m/1", "stop_requested": "x", "user": "bob"}, C)
    assert str(err) == "user bob may not stop m/1, which is alice's"
    refused(lab, {"op": "job.update", "job": "m/2", "state": "stopped", "reason": "x"}, C)    # nobody named
    refused(lab, {"op": "job.delete", "job": "m/2", "user": "alice"}, A)
    lab.apply({"op": "job.update", "job": "m/2", "state": "stopped", "user": "bob"}, A)      # bob's own, any box
    lab.apply({"op": "job.update", "job": "m/1", "stop_requested": "admin", "user": "root"}, C)
    lab.apply({"op": "job.delete", "job": "m/2", "user": "bob"}, B)
    assert "m/2" not in lab.state.jobs and lab.state.jobs["m/1"].stop_requested == "admin"


def test_a_user_stop_cannot_smuggle_other_changes():
    lab = Lab()
    refused(lab, {"op": "job.update", "job": "m/1", "stop_requested": "x", "user": "alice", "exit_code": 0}, C)
    refused(lab, {"op": "job.update", "job": "m/1", "state": "success", "user": "alice"}, C)


def test_datasets_are_added_as_the_holder_and_deleted_by_their_user_or_an_admin():
    lab = Lab(admins=["root"])
    tree = "ab" * 16
    refused(lab, {"op": "dataset.add_version", "name": "d", "tree": tree, "node": B, "user": "alice"}, C)
    lab.apply({"op": "dataset.add_version", "name": "d", "tree": tree, "node": C, "user": "alice"}, C)
    assert "holds versions of alice" in str(refused(lab, {"op": "dataset.delete", "name": "d", "user": "bob"}, C))
    refused(lab, {"op": "dataset.holders", "name": "d", "version": 1, "node": B, "holds": True}, C)
    lab.apply({"op": "dataset.holders", "name": "d", "version": 1, "node": C, "holds": False, "term": TERM}, A)
    lab.apply({"op": "dataset.delete", "name": "d", "version": 1, "user": "alice"}, B)
    assert lab.state.datasets["d"]["versions"] == {}


def test_removal_revokes_the_recorded_certificates_and_needs_an_admin():
    lab = Lab(admins=["root"])
    lab.state.trust.certs[C] = {"serial": "c1", "not_after": 9e9, "since": 0, "previous": {"serial": "c0"}}
    assert "not an admin" in str(refused(lab, {"op": "node.remove", "id": C, "user": "bob"}, A))
    refused(lab, {"op": "node.remove", "id": C}, B)                 # a box removing another
    lab.apply({"op": "node.remove", "id": C, "user": "root"}, B)
    assert set(lab.state.revoked) == {"c1", "c0"} and C in lab.state.removed
    lab.apply({"op": "node.remove", "id": B}, B)                    # leaving: itself
    assert B in lab.state.removed


def test_the_first_admin_comes_from_the_leader_only_while_there_is_none():
    lab = Lab()
    refused(lab, {"op": "admin.grant", "user": "mallory"}, B)
    lab.apply({"op": "admin.grant", "user": "root", "term": TERM}, A)
    refused(lab, {"op": "admin.grant", "user": "mallory", "term": TERM}, A)
    assert lab.state.admins == ["root"]
    restored = ClusterState()
    restored.restore(lab.state.snapshot())
    assert restored.admins == ["root"] and restored.revoked == lab.state.revoked


def test_entries_from_before_proposers_were_stamped_are_allowed():
    lab = Lab(admins=["root"])
    authorize(lab.state, {"op": "node.health", "id": C, "status": "down", "ts": 1.0}, None)


def test_membership_changes():
    lab = Lab(admins=["root"])
    state = lab.state
    authorize_conf(state, {"change": "remove", "node": C}, A, A)            # the leader's autopilot
    authorize_conf(state, {"change": "add_learner", "node": C}, C, A)       # its own seat
    authorize_conf(state, {"change": "remove", "node": C}, C, A)            # leaving
    authorize_conf(state, {"change": "remove", "node": B, "user": "root"}, C, A)   # an admin's command
    for cmd, proposer in (({"change": "remove", "node": B}, C), ({"change": "promote", "node": C}, C),
                          ({"change": "remove", "node": B, "user": "bob"}, C),
                          ({"change": "remove", "node": B, "user": "bob"}, A),
                          ({"change": "add_learner", "node": "d" * 16}, "d" * 16)):   # not announced
        with pytest.raises(Forbidden):
            authorize_conf(state, cmd, proposer, A)


def test_standing_of_a_certificate():
    lab = Lab()
    state, conf = lab.state, {"e" * 16}
    assert standing(state, conf, B, "b1") == "member"
    assert standing(state, conf, "e" * 16, "e1") == "member"             # a voter not yet announced
    assert standing(state, conf, "f" * 16, "f1") == "unheard"            # nothing known: this box is behind
    state.trust.certs["f" * 16] = {"serial": "f1", "not_after": 9e9, "since": 0, "previous": None}
    assert standing(state, conf, "f" * 16, "f1") == "joining"            # issued, never announced: may only do so
    state.trust.certs[B] = {"serial": "b2", "not_after": 9e9, "since": 0, "previous": {"serial": "b1"}}
    assert standing(state, conf, B, "b1") == "member" and standing(state, conf, B, "b0") is None
    lab.apply({"op": "node.remove", "id": B}, B)
    assert standing(state, conf, B, "b2") is None and standing(state, conf, B, "b1") is None
    state.trust.certs[B] = {"serial": "b3", "not_after": 9e9, "since": 0, "previous": None}   # joined again
    assert standing(state, conf, B, "b3") == "joining" and standing(state, conf, B, "b2") is None
    assert joining_may_propose(upsert(B), B) and not joining_may_propose(upsert(C), B)
    assert not joining_may_propose({"op": "job.submit", "id": B}, B)


NODE_OPS = st.sampled_from(["node.upsert", "node.health", "node.cert"])


@settings(max_examples=60, deadline=None)
@given(op=NODE_OPS, about=st.sampled_from([A, B, C]), proposer=st.sampled_from([A, B, C]),
       status=st.sampled_from(["up", "draining", "off", "down"]))
def test_a_box_speaks_for_itself_only(op, about, proposer, status):
    """The invariant: a node record, health or certificate is accepted iff it is the proposer's own."""
    lab = Lab()
    cmd = {"node.upsert": upsert(about), "node.health": {"op": "node.health", "id": about, "status": status},
           "node.cert": {"op": "node.cert", "id": about, "serial": "ab", "not_after": 9e9}}[op]
    full = commands.check({"ts": 99.0, **cmd})
    if about == proposer:
        authorize(lab.state, full, proposer)
    else:
        with pytest.raises(Forbidden):
            authorize(lab.state, full, proposer)


@settings(max_examples=60, deadline=None)
@given(user=st.sampled_from(["alice", "bob", "root", ""]), admins=st.sampled_from([(), ("root",)]),
       job=st.sampled_from(["m/1", "m/2"]))
def test_a_stop_is_allowed_iff_the_user_may_act_for_the_owner(user, admins, job):
    lab = Lab(admins=admins)
    owner = lab.state.jobs[job].user
    cmd = commands.check({"op": "job.update", "job": job, "stop_requested": "x", "user": user, "ts": 99.0})
    expected = not admins or user == owner or user in admins
    assert may_act_for(lab.state, user, owner) == expected
    if expected:
        authorize(lab.state, cmd, C)
    else:
        with pytest.raises(Forbidden):
            authorize(lab.state, cmd, C)
