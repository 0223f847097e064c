"""A box that could not keep a copy says so in the version (``dataset.holders`` with
``failed``, level 3) and is passed over for it a while (issue 21: copies go where they can live)."""

from __future__ import annotations

import pytest

from floydd.cluster.state import commands, versions
from floydd.cluster.replication.replicas import REFUSED_FOR, Liveness, choose_replicas, copies_note, refused
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, InvalidSpec
from tests.unit.cluster.test_state import Log, node

TREE = "ab" * 32


def _log(protocol: int) -> Log:
    log = Log(ClusterState(protocol=protocol))
    for nid in ("n1", "n2", "n3"):
        log(node(nid))
    log({"op": "dataset.add_version", "name": "mnist", "tree": TREE, "node": "n1", "idem_key": "u", "ts": 2.0})
    return log


def _failed(nid: str, ts: float, why: str = "no node could send tree ab") -> dict:
    return {"op": "dataset.holders", "name": "mnist", "version": 1, "node": nid, "holds": False, "failed": why,
            "ts": ts}


def test_a_refusal_is_recorded_and_cleared_when_the_box_holds_the_version():
    log = _log(3)
    v = log(_failed("n2", 10.0))
    assert v["holders"] == ["n1"] and v["refused"] == {"n2": {"why": "no node could send tree ab", "ts": 10.0}}
    v = log({"op": "dataset.holders", "name": "mnist", "version": 1, "node": "n2", "holds": True, "ts": 11.0})
    assert v["holders"] == ["n1", "n2"] and "refused" not in v


def test_a_refusal_is_a_level_3_field_refused_plainly_below_and_checked():
    assert versions.needs(_failed("n2", 1.0)) == 3
    with pytest.raises(Conflict, match="0.3"):
        versions.check_supported(ClusterState(protocol=2), _failed("n2", 1.0))
    log = _log(2)
    with pytest.raises(Conflict):                   # one that slipped through is refused on apply
        log(_failed("n2", 10.0))
    assert "refused" not in log.state.datasets["mnist"]["versions"]["1"]
    with pytest.raises(InvalidSpec, match="holds false"):
        commands.check({**_failed("n2", 1.0), "holds": True})
    with pytest.raises(InvalidSpec):
        commands.check(_failed("n2", 1.0, why="x" * 301))


def test_a_box_that_refused_is_passed_over_for_that_version_a_while():
    log = _log(3)
    nodes = {nid: {**n, "last_heartbeat": 100.0} for nid, n in log.state.nodes.items()}
    version = log.state.datasets["mnist"]["versions"]["1"]
    first = choose_replicas(nodes, version, 2, Liveness(now=100.0, grace=300.0, fresh=20.0))[0]
    other = ({"n2", "n3"} - {first}).pop()
    version = log(_failed(first, 100.0))
    soon = Liveness(now=100.0 + REFUSED_FOR - 1, grace=1e9, fresh=1e9)
    later = Liveness(now=100.0 + REFUSED_FOR + 1, grace=1e9, fresh=1e9)
    assert choose_replicas(nodes, version, 2, soon) == [other]
    assert refused(version, soon) == {first: "no node could send tree ab"}
    assert "could not keep a copy (no node could send tree ab)" in copies_note(nodes, version, 2, soon)
    assert choose_replicas(nodes, version, 2, later) == [first] and refused(version, later) == {}
