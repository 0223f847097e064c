"""The one rule table of who may do what to which object (floydd.cluster.state.access), and the
on-apply checks built on it (floydd.cluster.state.authz, from cluster level 3), on a real
replicated state; no I/O.

Every object x verb of the table is tried by its owner, another person, an admin and a
caller with no account, under each visibility or read rule, against the table written out
here a second time by hand (:data:`EXPECTED`): a change to one of them fails the test.
"""

from __future__ import annotations

import itertools

import pytest

from floydd.cluster.state import access, commands
from floydd.cluster.state.access import RULES, ReadRules, Target
from floydd.cluster.state.machine import ClusterState
from floydd.config import preset_for_tests
from floydd.errors import Forbidden, NotFound, UserError
from floydd.jobs.codesnap import CodeUploads

A, B = "a" * 16, "b" * 16
TREE, TREE2 = "0123456789abcdef", "fedcba9876543210"


class Lab:
    """root (admin), alice and bob; alice's lab dataset ``mnist``, her private ``faces``, her
    job ``ap/1`` with its output ``ap/1/output``; at cluster ``level``."""

    def __init__(self, level: int = 3, people: bool = True) -> None:
        self.state, self.index = ClusterState(protocol=level), 0
        if people:
            for name in ("root", "alice", "bob"):
                self.apply({"op": "person.add", "name": name, "role": "admin" if name == "root" else "user",
                            "user": "root"})
        self.add("mnist", "alice")
        self.add("faces", "alice", visibility="private")
        self.apply({"op": "job.submit", "idem_key": "k-ap-1", "project": "ap", "spec": {"command": "x"}, "origin": A,
                    "user": "alice"})
        self.add("ap/1/output", "alice")

    def apply(self, cmd: dict, proposer: str = A):
        self.index += 1
        full = {"ts": float(self.index), **cmd, "proposer": proposer}
        return self.state.apply(commands.check(full), index=self.index, term=1)

    def add(self, name: str, user: str, tree: str = TREE, **kw) -> dict:
        return self.apply({"op": "dataset.add_version", "name": name, "tree": tree, "node": A, "user": user, **kw})

    def refused(self, cmd: dict) -> Forbidden:
        before = self.state.snapshot()
        with pytest.raises(Forbidden) as info:
            self.apply(cmd)
        assert self.state.snapshot() == before, "a refused command changes nothing"
        return info.value


PEOPLE = {"owner": "alice", "other": "bob", "admin": "root", "nobody": None}
"""Who tries: the owner, another person, an admin, a caller with no account."""
ALL, MINE = frozenset(PEOPLE), frozenset({"owner", "admin"})

EXPECTED = {
    # (object, verb, setting): who may. setting: a dataset's visibility, or the read rule's value
    ("dataset", "read", "lab"): ALL, ("dataset", "mount", "lab"): ALL, ("dataset", "clone", "lab"): ALL,
    ("dataset", "read", "private"): MINE, ("dataset", "mount", "private"): MINE, ("dataset", "clone", "private"): MINE,
    ("dataset", "add", "lab"): MINE, ("dataset", "add", "private"): MINE,
    ("dataset", "delete", "lab"): MINE, ("dataset", "delete", "private"): MINE,
    ("output", "read", "owner"): MINE, ("output", "mount", "owner"): MINE, ("output", "clone", "owner"): MINE,
    ("output", "read", "lab"): ALL, ("output", "mount", "lab"): ALL, ("output", "clone", "lab"): ALL,
    ("output", "add", "owner"): MINE, ("output", "add", "lab"): MINE,
    ("output", "delete", "owner"): MINE, ("output", "delete", "lab"): MINE,
    ("code", "read", "owner"): MINE, ("code", "clone", "owner"): MINE,
    ("code", "read", "lab"): ALL, ("code", "clone", "lab"): ALL,
    ("logs", "read", "lab"): ALL, ("logs", "read", "owner"): MINE,
    ("metrics", "read", "lab"): ALL, ("metrics", "read", "owner"): MINE,
}
_KNOB = {"output": "job_outputs", "code": "job_code", "logs": "job_logs", "metrics": "job_logs"}


def _target(lab: Lab, kind: str, setting: str) -> tuple[Target, ReadRules]:
    if kind == "dataset":
        return access.dataset_target(lab.state, "faces" if setting == "private" else "mnist"), ReadRules()
    rules = ReadRules(**{_KNOB[kind]: setting})
    if kind == "output":
        return access.dataset_target(lab.state, "ap/1/output", "ap/1/output:1"), rules
    return access.job_target(lab.state.job("ap/1"), kind), rules


def test_the_table_written_twice_agrees_and_covers_every_pair():
    assert {(k, v) for k, v, _ in EXPECTED} == set(RULES)
    assert {k for k, _ in RULES} == set(access.OBJECTS) and {v for _, v in RULES} == set(access.VERBS)


@pytest.mark.parametrize("kind, verb, setting", sorted(EXPECTED))
def test_every_object_verb_and_person_is_decided_as_the_table_says(kind, verb, setting):
    lab = Lab()
    target, rules = _target(lab, kind, setting)
    assert target.owner == "alice" and target.kind == kind
    for role, person in PEOPLE.items():
        may = access.allowed(lab.state, person, target, verb, rules)
        assert may == (role in EXPECTED[(kind, verb, setting)]), (role, kind, verb, setting)
        if may:
            access.check(lab.state, person, target, verb, rules)
            continue
        with pytest.raises(Forbidden) as refused:
            access.check(lab.state, person, target, verb, rules)
        err = refused.value
        assert err.status == 403 and err.hint and "\n" not in err.message
        assert err.message.startswith("user bob may not " if person else "a caller with no account may not ")
        assert "alice's" in err.message and target.name in err.message


def test_in_a_lab_of_one_its_user_may_do_everything():
    lab = Lab(people=False)
    for (kind, verb), setting in itertools.product(RULES, ("owner", "private")):
        if (kind, verb, setting) not in EXPECTED:
            continue
        target, rules = _target(lab, kind, setting)
        assert access.allowed(lab.state, "whoever", target, verb, rules)


def test_the_refusals_say_whose_it_is_in_one_line():
    lab = Lab()
    def said(target: Target, verb: str, **kw) -> Forbidden:
        with pytest.raises(Forbidden) as refused:
            access.check(lab.state, "bob", target, verb, **kw)
        return refused.value
    faces = access.dataset_target(lab.state, "faces", "faces:1")
    err = said(faces, "clone")
    assert (str(err), err.code) == ("user bob may not clone faces:1: it is alice's private dataset", "private_dataset")
    assert str(said(faces, "mount")) == "user bob may not mount faces:1: it is alice's private dataset"
    err = said(access.dataset_target(lab.state, "mnist"), "add")
    assert (str(err), err.code) == ("user bob may not add a version to mnist: it is alice's dataset", "not_the_owner")
    err = said(access.dataset_target(lab.state, "ap/1/output", "ap/1/output:1"), "clone")
    assert str(err) == "user bob may not clone ap/1/output:1: it is the output of alice's job ap/1"
    assert "job_outputs" in err.hint
    job = lab.state.job("ap/1")
    assert str(said(access.job_target(job, "code"), "read")) == "user bob may not read the code of ap/1, which is alice's"
    assert str(said(access.job_target(job, "code"), "clone", doing="export")) == \
        "user bob may not export the code of ap/1, which is alice's"
    with pytest.raises(Forbidden, match="^user bob may not collect garbage: it is an admin's$"):
        access.check_admin(lab.state, "bob", "collect garbage")
    access.check_admin(lab.state, "root", "collect garbage")


def test_a_caller_with_no_account_owns_nothing_not_even_what_nobody_named_owns():
    lab = Lab()
    unnamed = Target(kind="code", name="old/1", owner="", job="old/1")
    assert not access.allowed(lab.state, None, unnamed, "read")
    assert access.allowed(lab.state, "", unnamed, "read")          # the daemon's own (a box's import) is its owner's


def test_a_pair_outside_the_table_is_a_bug_not_a_refusal():
    lab = Lab()
    with pytest.raises(ValueError, match="no rule for mount on a code"):
        access.allowed(lab.state, "alice", access.job_target(lab.state.job("ap/1"), "code"), "mount")


def test_an_output_is_its_jobs_owners_whoever_published_it():
    lab = Lab()
    assert access.output_job("ap/1/output") == "ap/1" and access.output_job("ap-1-output") is None
    assert access.output_job("mnist") is None and access.output_job("a/b/output") is None
    lab.apply({"op": "job.submit", "idem_key": "k-ap-2", "project": "ap", "spec": {"command": "x"}, "origin": A,
               "user": "bob"})
    assert lab.state.jobs["ap/2"].user == "bob"
    # the admin publishes it (an import, a repair): it is still bob's, from level 3
    version = lab.add("ap/2/output", "root")
    assert version["owner"] == "bob" and lab.state.datasets["ap/2/output"]["owner"] == "bob"
    assert access.dataset_target(lab.state, "ap/2/output").owner == "bob"
    err = lab.refused({"op": "dataset.add_version", "name": "ap/2/output", "tree": TREE2, "node": A, "user": "alice"})
    assert "the output of bob's job ap/2" in str(err)
    lab.add("ap/2/output", "bob", TREE2)             # the job's owner's box publishes a checkpoint


def test_at_level_two_outputs_keep_who_added_them_and_lab_datasets_take_anyones_versions():
    lab = Lab(level=2)
    lab.apply({"op": "job.submit", "idem_key": "k-ap-2", "project": "ap", "spec": {"command": "x"}, "origin": A,
               "user": "bob"})
    assert lab.add("ap/2/output", "root")["owner"] == "root"     # as 0.2 boxes catalogue it
    assert lab.add("mnist", "bob", TREE2)["ref"] == "mnist:2"     # an 0.2 cluster allowed it: so does this box
    lab.refused({"op": "dataset.add_version", "name": "faces", "tree": TREE2, "node": A, "user": "bob"})


def test_from_level_three_only_the_owner_or_an_admin_adds_a_version_or_deletes():
    lab = Lab()
    err = lab.refused({"op": "dataset.add_version", "name": "mnist", "tree": TREE2, "node": A, "user": "bob"})
    assert (str(err), err.code) == ("user bob may not add a version to mnist: it is alice's dataset", "not_the_owner")
    assert lab.add("mnist", "root", TREE2)["ref"] == "mnist:2"          # an admin may
    assert lab.add("mnist", "alice", TREE2)["ref"] == "mnist:3"         # its owner may
    assert lab.add("bobs", "bob")["owner"] == "bob"                     # a new dataset: whoever makes it
    lab.refused({"op": "dataset.delete", "name": "mnist", "version": 3, "user": "bob"})
    lab.refused({"op": "dataset.delete", "name": "ap/1/output", "user": "bob"})
    # the owner deletes every version, the admin's among them (at level 2: only who added each)
    lab.apply({"op": "dataset.delete", "name": "mnist", "user": "alice"})
    assert lab.state.datasets["mnist"]["versions"] == {}
    lab.apply({"op": "dataset.delete", "name": "ap/1/output", "version": 1, "user": "root"})


def test_level_two_deletes_are_by_who_added_every_version():
    lab = Lab(level=2)
    lab.add("mnist", "root", TREE2)
    assert "holds versions of root" in str(lab.refused({"op": "dataset.delete", "name": "mnist", "user": "alice"}))


def test_read_rules_come_from_the_config_and_say_what_is_wrong():
    rules = ReadRules.of(preset_for_tests("/tmp/x", job_outputs="lab", job_code="owner", job_logs="owner"))
    assert rules == ReadRules(job_outputs="lab", job_code="owner", job_logs="owner")
    assert ReadRules.of(preset_for_tests("/tmp/x")) == ReadRules(job_outputs="owner", job_code="owner", job_logs="lab")
    with pytest.raises(UserError, match="job_code") as err:
        preset_for_tests("/tmp/x", job_code="everyone")
    assert "FLOYDD_JOB_CODE" in err.value.hint
    with pytest.raises(UserError, match="job_logs"):
        ReadRules(job_logs="world")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_code_upload_handle_is_its_senders_on_this_box_until_it_expires():
    clock = _Clock()
    uploads = CodeUploads(ttl=60.0, clock=clock)
    handle = uploads.add("ab" * 32, "alice")
    assert handle.startswith("cu-") and len(handle) == 35 and uploads.add("ab" * 32, "alice") != handle
    assert uploads.tree(handle, "alice") == "ab" * 32 == uploads.tree(handle, "alice")   # a retried submit
    with pytest.raises(Forbidden, match=f"user bob may not submit code upload {handle}: alice sent it"):
        uploads.tree(handle, "bob")
    with pytest.raises(Forbidden, match="a caller with no account"):
        uploads.tree(handle, None)
    with pytest.raises(NotFound, match="not known on this box") as err:
        uploads.tree("cu-" + "0" * 32, "alice")
    assert err.value.code == "code_upload_unknown" and "floyd run" in err.value.hint
    with pytest.raises(UserError, match="not a code upload handle"):
        uploads.tree("ab" * 32, "alice")                  # a tree id is never taken for one
    clock.now += 61.0
    with pytest.raises(NotFound, match="expired"):
        uploads.tree(handle, "alice")


def test_code_upload_handles_are_bounded():
    clock = _Clock()
    uploads = CodeUploads(ttl=60.0, clock=clock, limit=3)
    first = uploads.add("aa" * 32, "alice")
    later = [uploads.add("bb" * 32, "alice") for _ in range(3)]
    with pytest.raises(NotFound):
        uploads.tree(first, "alice")                       # the oldest went to make room
    assert all(uploads.tree(h, "alice") == "bb" * 32 for h in later)


def test_an_archived_jobs_output_is_still_its_owners():
    lab = Lab()
    lab.apply({"op": "job.update", "job": "ap/1", "state": "stopped", "reason": "user", "user": "alice"})
    assert lab.apply({"op": "job.archive", "jobs": ["ap/1"], "term": 1}) == {"archived": ["ap/1"]}
    assert "ap/1" not in lab.state.jobs and access.output_owner(lab.state, "ap/1/output") == "alice"
    lab.refused({"op": "dataset.add_version", "name": "ap/1/output", "tree": TREE2, "node": A, "user": "bob"})
    assert not access.allowed(lab.state, "bob", access.dataset_target(lab.state, "ap/1/output"), "read")
