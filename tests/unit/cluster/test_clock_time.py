"""Time (issue 21): liveness on each box's own monotonic clock (floydd.cluster.heard), never a
``ts`` another box wrote; each box's clock offset from the leader, measured NTP-like and
carried in its heartbeat (floydd.cluster.clockskew)."""

from __future__ import annotations

import pytest

from floydd.cluster.state import commands, versions
from floydd.cluster.driver.applied import Applied
from floydd.cluster.clockskew import ClockReading, Episodes, describe, measure, skewed
from floydd.cluster.heard import Heard
from floydd.cluster.replication.replicas import Liveness, choose_replicas, counted
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, InvalidSpec
from floydd.scheduler import outages

TEN_MINUTES = 600.0


class Mono:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _applied(cmd: dict, *, replay: bool = False) -> Applied:
    return Applied(index=1, term=1, command=cmd, replay=replay)


def test_heard_counts_a_nodes_own_entries_applied_live_and_nothing_else():
    mono = Mono()
    heard = Heard(clock=mono)
    mono.now = 60.0
    heard.on_apply(_applied({"op": "node.health", "id": "a", "status": "up", "ts": 1e12}))   # ts is ignored
    heard.on_apply(_applied({"op": "node.health", "id": "b", "status": "suspect", "ts": 0.0}))  # the leader's word
    heard.on_apply(_applied({"op": "node.upsert", "id": "c", "ts": 0.0}, replay=True))        # from before this start
    heard.on_apply(_applied({"op": "job.update", "id": "d", "ts": 0.0}))
    mono.now = 75.0
    assert heard.ages(["a", "b", "c", "d"]) == {"a": 15.0, "b": 25.0, "c": 25.0, "d": 25.0}   # since start: 25 s
    heard.on_apply(_applied({"op": "node.health", "id": "b", "status": "off", "ts": 0.0}))     # its clean stop
    assert heard.age("b") == 0.0


def _state_with(nodes: dict[str, float]) -> ClusterState:
    """A state whose nodes' last heartbeats were stamped by their own (skewed) clocks."""
    state = ClusterState()
    for i, (nid, ts) in enumerate(nodes.items()):
        state.apply({"op": "node.upsert", "id": nid, "name": f"box-{nid}", "address": "10.0.0.1", "cluster_port": 1,
                     "ts": ts}, index=i + 1, term=1)
    return state


def test_boxes_ten_minutes_ahead_and_behind_are_judged_by_when_they_were_heard_not_by_their_ts():
    now = 10_000.0                                       # the judging box's wall clock
    state = _state_with({"ahead": now + TEN_MINUTES, "behind": now - TEN_MINUTES, "gone": now})
    ages = {"ahead": 10.0, "behind": 1.0, "gone": 40.0}  # on the judge's monotonic clock
    assert state.node_health(now, 20.0, ages) == {"ahead": "up", "behind": "up", "gone": "stale"}
    assert state.node_health(now, 20.0)["behind"] == "stale"            # what comparing ts got wrong
    quiet = outages.quiet(state.nodes, {"ahead": 10.0, "behind": 0.5}, ages)
    assert quiet == {"ahead": 10.0, "behind": 0.5, "gone": 40.0}
    assert outages.suspects(state.nodes, quiet, 3.0) == ["ahead", "gone"]   # "ahead" is quiet: suspect all the same
    live = Liveness(now=now, grace=30.0, fresh=20.0, ages=ages)
    version = {"tree": "ab" * 32, "holders": ["behind", "ahead"]}
    assert counted(state.nodes, version["holders"], live) == ["behind", "ahead"]
    assert choose_replicas(state.nodes, version, 2, live) == []         # no third copy
    wall = Liveness(now=now, grace=30.0, fresh=20.0)
    assert choose_replicas(state.nodes, version, 2, wall) == ["gone"]   # the bug: "behind" looked gone


def test_a_reading_is_the_ntp_midpoint_and_a_skew_counts_past_the_round_trips_doubt():
    reading = measure(sent=1000.0, leader_now=400.5, received=1001.0)   # the box runs 10 min ahead
    assert reading == ClockReading(offset=-600.0, rtt=1.0)
    assert describe(reading) == "10.0 min ahead of the leader"
    assert describe(ClockReading(offset=600.0, rtt=0.0)) == "10.0 min behind the leader"
    assert describe(ClockReading(offset=0.4, rtt=0.0)) == "in step with the leader"
    assert skewed(reading, 30.0) and not skewed(ClockReading(offset=30.4, rtt=1.0), 30.0)
    assert not skewed(None, 30.0)
    assert ClockReading.from_wire(reading.wire()) == reading
    assert ClockReading.from_wire({"offset": True, "rtt": 0}) is None


def test_a_skew_is_logged_once_when_it_starts_and_once_when_it_ends():
    episodes, far, near = Episodes(), ClockReading(offset=600.0, rtt=0.01), ClockReading(offset=0.1, rtt=0.01)
    seen = [episodes.see("b", r, 30.0) for r in (near, far, far, far, None, far, near, near)]
    assert seen == [None, "start", None, None, None, None, "end", None]


def test_the_clock_field_is_level_3_its_own_box_only_and_checked():
    beat = {"op": "node.health", "id": "n1", "status": "up", "ts": 1.0, "clock": {"offset": -600.0, "rtt": 0.002}}
    assert versions.needs(beat) == 3
    commands.check(beat)
    for bad in ({"offset": "x", "rtt": 0.0}, {"offset": 1.0}, {"offset": 1.0, "rtt": -1.0}):
        with pytest.raises(InvalidSpec, match="clock is"):
            commands.check({**beat, "clock": bad})
    state = _state_with({"n1": 0.0})
    state.protocol = 2
    with pytest.raises(Conflict, match="needs every box"):
        versions.check_supported(state, beat)
    state.protocol = 3
    state.apply({**beat, "proposer": "n1"}, index=5, term=1)
    assert state.nodes["n1"]["clock"] == {"offset": -600.0, "rtt": 0.002}
