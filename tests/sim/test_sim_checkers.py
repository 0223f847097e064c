"""The simulator's own parts can fail: checkers flag bad histories, the disk forgets,
the network partitions and holds."""

from __future__ import annotations

import pytest

from floydd.cluster.raft import ConfState, Entry, HardState, Snapshot, bootstrap_state
from floydd.cluster.raft.log import RaftLog

from .checker import SafetyChecker, Violation
from .disk import SimDisk
from .linearizability import INF, Op, check_history, check_register
from .world import SimConfig, Simulation


def w(value, call, ret=INF, key=0, client=0):
    return Op(client, key, True, value, call, ret)


def r(value, call, ret, key=0, client=1):
    return Op(client, key, False, value, call, ret)


def test_sequential_history_is_linearizable() -> None:
    assert check_register([w(1, 1, 2), r(1, 3, 4), w(2, 5, 6), r(2, 7, 8)])


def test_stale_read_is_not_linearizable() -> None:
    assert not check_register([w(1, 1, 2), w(2, 3, 4), r(1, 5, 6)])


def test_concurrent_write_may_be_seen_either_way() -> None:
    assert check_register([w(1, 1, 10), r(1, 2, 3), r(None, 4, 5)]) is False
    assert check_register([w(1, 1, 10), r(None, 2, 3), r(1, 4, 5)])


def test_unknown_write_may_take_effect_late_or_never() -> None:
    assert check_register([w(1, 1), r(None, 2, 3), r(1, 10, 11)])
    assert check_register([w(1, 1), r(None, 2, 3)])
    assert not check_register([w(1, 1), r(1, 2, 3), r(None, 4, 5)])   # effects never go back


def test_read_of_a_value_never_written_fails() -> None:
    assert not check_register([w(1, 1, 2), r(7, 3, 4)])


def test_keys_are_checked_separately() -> None:
    ops = [w(1, 1, 2, key=0), w(5, 1, 2, key=1), r(5, 3, 4, key=1), r(1, 5, 6, key=0)]
    assert check_history(ops) == []
    ops.append(r(1, 7, 8, key=1))
    assert check_history(ops) == [1]


def _log(*terms):
    return RaftLog(Snapshot(), [Entry(t, i + 1) for i, t in enumerate(terms)])


def test_checker_flags_two_leaders_in_a_term() -> None:
    c = SafetyChecker()
    c.on_leader(1, 3, _log(1))
    c.on_leader(1, 3, _log(1))
    with pytest.raises(Violation, match="two leaders"):
        c.on_leader(2, 3, _log(1))


def test_checker_flags_a_changed_commit_and_an_incomplete_leader() -> None:
    c = SafetyChecker()
    log = _log(1, 2)
    log.committed = 2
    c.on_commit(1, log, 1)
    other = _log(1, 3)
    other.committed = 2
    with pytest.raises(Violation, match="committed entry 2 changed"):
        c.on_commit(2, other, 1)
    with pytest.raises(Violation, match="leader completeness"):
        c.on_leader(3, 4, _log(1))


def test_checker_flags_log_matching_and_divergent_state_machines() -> None:
    c = SafetyChecker()
    log = _log(1)
    c.on_entries(1, log, [Entry(2, 2, b"a")])
    with pytest.raises(Violation, match="log matching"):
        c.on_entries(2, log, [Entry(2, 2, b"b")])
    c.on_apply(1, Entry(2, 2, b"a"))
    with pytest.raises(Violation, match="state machine safety"):
        c.on_apply(2, Entry(2, 2, b"b"))
    c.on_snapshot(1, 5, b"x")
    with pytest.raises(Violation, match="diverged"):
        c.on_snapshot(2, 5, b"y")


def test_disk_loses_what_was_not_fsynced() -> None:
    disk = SimDisk(bootstrap_state(ConfState(voters=frozenset({1}))))
    disk.write(HardState(2, 1, 1), [Entry(2, 2, b"kept")], None)
    disk.fsync()
    disk.write(HardState(3, 1, 2), [Entry(3, 3, b"lost")], None)
    disk.crash()
    state = disk.load()
    assert state.hard_state == HardState(2, 1, 1) and [e.data for e in state.entries] == [b"kept"]


def test_network_partitions_cut_and_hold() -> None:
    sim = Simulation(SimConfig(seed=1, faults=False))
    net = sim.net
    net.partition([{1, 2}, {3, 4, 5}])
    assert (1, 3) in net.blocked and (3, 1) in net.blocked and (1, 2) not in net.blocked
    net.cut_one_way(1, 2)
    assert (1, 2) in net.blocked and (2, 1) not in net.blocked
    net.hold = 1.0
    from floydd.cluster.raft import Heartbeat
    queued = len(sim.queue)
    net.send(Heartbeat(frm=1, to=3, term=1))
    assert len(net.held) == 1 and len(sim.queue) == queued
    net.heal()
    assert net.held == [] and len(sim.queue) == queued + 1     # delivered late
