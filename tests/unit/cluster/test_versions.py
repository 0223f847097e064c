"""Boxes of adjacent releases in one cluster (floydd.cluster.state.versions): the level is raised only
once every box speaks it, nothing of a newer level is applied before, and behaviour that came
with level 2 switches on at the same log index everywhere."""

from __future__ import annotations

import msgpack
import pytest

from floydd.cluster.state import commands, versions
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, Forbidden

NEW, OLD = "a" * 16, "b" * 16


class Log:
    """A state fed committed commands in order, as a box applies its log."""

    def __init__(self, state: ClusterState | None = None) -> None:
        self.state, self.index = state or ClusterState(), 0

    def apply(self, cmd: dict, proposer: str = NEW):
        self.index += 1
        full = {"ts": float(self.index), **cmd, "proposer": proposer}
        return self.state.apply(commands.check(full), index=self.index, term=1)

    def box(self, nid: str, name: str, *, new: bool, level: int = 2) -> None:
        # an 0.1 box says nothing of its release; a new one says its level (an 0.2 box: 2)
        labels = {versions.LABEL: str(level), versions.VERSION_LABEL: f"0.{level}.0"} if new else {}
        self.apply({"op": "node.upsert", "id": nid, "name": name, "address": "10.0.0.1", "cluster_port": 7654,
                    "labels": labels}, proposer=nid)


def _mixed() -> Log:
    log = Log()
    log.box(NEW, "box1", new=True)
    log.box(OLD, "box2", new=False)
    return log


def test_a_log_starts_at_level_1_and_newer_commands_are_refused_naming_who_is_behind():
    log = _mixed()
    assert log.state.protocol == 1 and versions.cluster_level(log.state) == 1
    before = log.state.snapshot()
    with pytest.raises(Conflict) as refused:
        log.apply({"op": "person.add", "name": "alice", "role": "user", "user": "root"})
    assert refused.value.code == "cluster_too_old"
    assert "every box of the cluster on floydd 0.2" in str(refused.value) and "box2 runs an older release" in str(refused.value)
    with pytest.raises(Conflict):                       # a new field of an old op is refused alike
        log.apply({"op": "dataset.add_version", "name": "d", "tree": "ab" * 8, "visibility": "private"})
    assert log.state.snapshot() == before


def test_the_level_rises_only_when_every_box_not_removed_speaks_it_and_never_falls():
    log = _mixed()
    with pytest.raises(Forbidden, match="not spoken by every box: box2"):
        log.apply({"op": versions.OP, "level": 2})
    log.box(OLD, "box2", new=True)                      # box2 upgraded: it announces itself again
    assert versions.cluster_level(log.state) == 2
    assert log.apply({"op": versions.OP, "level": 2}) == 2
    assert log.apply({"op": versions.OP, "level": 1}) == 2          # raised twice, or late: a max
    with pytest.raises(Forbidden, match=f"level {versions.PROTOCOL + 1} is not spoken by every box"):
        log.apply({"op": versions.OP, "level": versions.PROTOCOL + 1})
    log.apply({"op": "person.add", "name": "alice", "role": "user", "user": "root"})

    other = _mixed()                                    # an old box removed for good does not hold it back
    other.apply({"op": "node.remove", "id": OLD, "user": "root"})
    assert versions.cluster_level(other.state) == 2


def test_the_audit_chain_and_admin_only_join_tokens_begin_with_level_2():
    log = _mixed()
    log.apply({"op": "admin.grant", "user": "root", "term": 1})
    token = {"op": "token.create", "secret_sha256": "0" * 64, "expires": 3600.0}
    log.apply({**token, "id": "c" * 16, "made_by": "bob"})       # as an 0.1 box takes it: any member
    log.apply({"op": "job.submit", "idem_key": "k1", "project": "p", "spec": {"project": "p", "command": "x"},
               "user": "alice"})
    assert log.state.audit.entries() == []              # an 0.1 box derives none: no box does yet
    log.box(OLD, "box2", new=True)
    log.apply({"op": versions.OP, "level": 2})
    log.apply({"op": "job.submit", "idem_key": "k2", "project": "p", "spec": {"project": "p", "command": "x"},
               "user": "alice"})
    assert [e["op"] for e in log.state.audit.entries()] == [versions.OP, "job.submit"]
    with pytest.raises(Forbidden, match="may not make join tokens"):
        log.apply({**token, "id": "d" * 16, "made_by": "bob"})


def test_a_snapshot_keeps_the_level_and_what_an_old_box_reads_of_admins():
    log = _mixed()
    log.apply({"op": "admin.grant", "user": "root", "term": 1})
    raw = msgpack.unpackb(log.state.snapshot(), raw=False)
    assert raw["v"] == 1 and raw["admins"] == ["root"] and raw["protocol"] == 1
    log.box(OLD, "box2", new=True)
    log.apply({"op": versions.OP, "level": 2})
    restored = ClusterState()
    restored.restore(log.state.snapshot())
    assert restored.protocol == 2 and restored.admins == ["root"]
    del raw["protocol"], raw["people"]                  # an 0.1 box's snapshot: admins alone
    restored.restore(msgpack.packb(raw, use_bin_type=True))
    assert restored.protocol == 1 and restored.admins == ["root"]


def test_what_each_command_needs_and_how_a_box_stamps_it():
    assert versions.needs({"op": "job.submit"}) == 1 and versions.needs({"op": versions.OP, "level": 2}) == 1
    assert versions.needs({"op": "apitoken.create"}) == 2 and versions.needs({"op": "job.import"}) == 2
    assert versions.needs({"op": "node.upsert", "config": "defaults"}) == 2
    assert versions.needs({"op": "job.submit", "v": 2}) == 2
    old, new = ClusterState(), ClusterState(protocol=2)
    assert versions.stamped(old, {"op": "job.submit"}) == {"op": "job.submit"}     # an 0.1 leader takes no v
    assert versions.stamped(new, {"op": "job.submit"}) == {"op": "job.submit", "v": versions.PROTOCOL}
    with pytest.raises(Conflict):
        versions.stamped(old, {"op": "person.add"})


def test_level_3_rises_as_level_2_did_once_the_last_02_box_is_upgraded():
    log = _mixed()
    log.box(OLD, "box2", new=True)
    log.apply({"op": versions.OP, "level": 2})
    log.box(NEW, "box1", new=True, level=3)
    with pytest.raises(Forbidden, match="level 3 is not spoken by every box: box2"):
        log.apply({"op": versions.OP, "level": 3})
    log.box(OLD, "box2", new=True, level=3)
    assert versions.cluster_level(log.state) == 3 == versions.PROTOCOL
    assert log.apply({"op": versions.OP, "level": 3}) == 3 and versions.at_least(log.state, 3)


def test_only_adjacent_releases_meet_and_an_older_box_cannot_join_a_newer_cluster():
    assert versions.peer_supported(str(versions.PROTOCOL - 1)) and versions.peer_supported(str(versions.PROTOCOL))
    assert versions.peer_supported(str(versions.PROTOCOL + 1))
    assert not versions.peer_supported(None) and not versions.peer_supported("1")    # an 0.1 box: two levels away
    assert not versions.peer_supported(str(versions.PROTOCOL + 2)) and not versions.peer_supported("x")
    versions.check_joiner(ClusterState(), None)                      # a level-1 cluster takes an 0.1 box
    with pytest.raises(Conflict, match="older release cannot join") as refused:
        versions.check_joiner(ClusterState(protocol=2), None)
    assert refused.value.code == "joiner_too_old"
    versions.check_joiner(ClusterState(protocol=2), 2)
