"""The one road of every kind of copy (:mod:`floydd.cluster.replication.keeper`), over a fake
kind and a fake cluster: who makes a missing copy, passing one on after failures, the leader
trimming copies beyond R, a node that left dropped from the holders, a copy stopped by an entry."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

from floydd.cluster.driver.applied import Applied
from floydd.cluster.replication.keeper import PASS_AFTER, CopyKeeper, Touched, liveness_of
from floydd.cluster.replication.replicas import choose_replicas, extra_copies
from floydd.errors import Unavailable
from tests.conftest import wait_until_async

TREE = "ab" * 32


class _Cluster:
    def __init__(self, node_id: str, nodes: dict, *, leader: bool = False) -> None:
        self.node_id, self.is_leader, self.alone = node_id, leader, False
        self.config = SimpleNamespace(stale_after=5.0)
        self.state = SimpleNamespace(nodes=nodes)
        self.hooks: list = []
        self.beats = 0

    def on_apply(self, callback) -> None:
        self.hooks.append(callback)

    def heard_ages(self) -> dict[str, float]:
        return {nid: 0.0 for nid in self.state.nodes}

    def beat_soon(self) -> None:
        self.beats += 1

    def apply(self, cmd: dict, result: object = None) -> None:
        for hook in self.hooks:
            hook(Applied(index=1, term=1, command=cmd, result=result))


class _Kind:
    """Items ``name`` -> entry; a copy is made by ``make`` unless ``failing`` says why not."""

    what = "things"
    log = logging.getLogger("tests.copy_keeper")
    failures = (Unavailable,)
    gone = ()

    def __init__(self, entries: dict, *, may_pass: bool = True) -> None:
        self.entries, self._may_pass = entries, may_pass
        self.failing = ""
        self.made: list[str] = []
        self.said: list[tuple] = []

    def items(self):
        return list(self.entries.items())

    def entry(self, key):
        return self.entries.get(key)

    def label(self, key) -> str:
        return f"thing {key}"

    def applied(self, cmd: dict, result: object) -> Touched:
        if cmd["op"] == "thing.touch":
            return Touched(wake=True, check=(cmd["key"],))
        if cmd["op"] == "thing.redo":            # this box's copy went: stop it, look again
            return Touched(wake=True, cancel=lambda k: k == cmd["key"], check=(cmd["key"],))
        return Touched()

    def windows(self, live) -> frozenset:
        return frozenset()

    def extra(self, entry, live) -> list[str]:
        return extra_copies(self._nodes, entry, 2, live)

    def may_trim(self) -> bool:
        return True

    def may_pass(self) -> bool:
        return self._may_pass

    async def make(self, key, entry) -> int | None:
        if self.failing:
            raise Unavailable(self.failing)
        self.made.append(key)
        return 10

    async def set_holder(self, key, *, holds: bool, node: str | None = None, failed: str | None = None) -> None:
        node = node or self.me
        self.said.append((key, holds, node, failed))
        holders = self.entries[key]["holders"]
        if holds and node not in holders:
            holders.append(node)
        elif not holds and node in holders:
            holders.remove(node)

    def on_repair(self):
        return None


def _up(*ids: str) -> dict:
    return {nid: {"id": nid, "name": f"box-{nid}", "status": "up", "last_heartbeat": 100.0} for nid in ids}


def _keeper(node_id: str, nodes: dict, entries: dict, *, leader: bool = False, may_pass: bool = True):
    cluster = _Cluster(node_id, nodes, leader=leader)
    kind = _Kind(entries, may_pass=may_pass)
    kind.me, kind._nodes = node_id, nodes
    keeper = CopyKeeper(kind, cluster, state=cluster.state, replicas=2,
                        liveness=liveness_of(cluster, 30.0, clock=lambda: 101.0), retry=(0.001, 0.002), attempts=4)
    return keeper, kind, cluster


async def test_the_box_among_the_takers_makes_the_copy_and_says_it_holds_it_and_no_other_does():
    nodes = _up("n1", "n2", "n3")
    live = liveness_of(_Cluster("n1", nodes), 30.0, clock=lambda: 101.0)()
    taker = choose_replicas(nodes, {"holders": ["n1"], "tree": TREE}, 2, live)[0]
    other = ({"n2", "n3"} - {taker}).pop()
    for me in (taker, other):
        entries = {"x": {"tree": TREE, "holders": ["n1"]}}
        keeper, kind, _ = _keeper(me, nodes, entries)
        keeper.start()
        if me == taker:
            await wait_until_async(lambda: kind.said, what="the holder proposed")
            assert kind.made == ["x"] and kind.said == [("x", True, taker, None)]
        else:
            assert not keeper.replicating   # decided at once, in start()
            await asyncio.sleep(0)          # (one turn of the loop: a copy started would have begun)
            assert kind.made == [] and kind.said == []
        await keeper.close()


async def test_a_copy_that_keeps_failing_is_passed_on_where_the_kind_allows_it():
    nodes = _up("n1", "n2", "n3")
    live = liveness_of(_Cluster("n1", nodes), 30.0, clock=lambda: 101.0)()
    taker = choose_replicas(nodes, {"holders": ["n1"], "tree": TREE}, 2, live)[0]
    for may_pass in (True, False):
        keeper, kind, _ = _keeper(taker, nodes, {"x": {"tree": TREE, "holders": ["n1"]}}, may_pass=may_pass)
        kind.failing = "no node could send it"
        keeper.start()
        await wait_until_async(lambda: not keeper.replicating, what="the copy given up")
        if may_pass:
            assert kind.said == [("x", False, taker, "no node could send it")], kind.said
        else:
            assert kind.said == []
        await keeper.close()
    assert PASS_AFTER < 4                   # the keeper above tried 4 times


async def test_the_leader_drops_copies_beyond_r_one_at_a_time_and_a_follower_does_not():
    nodes = _up("n1", "n2", "n3", "n4")
    for leader in (False, True):
        entries = {"x": {"tree": TREE, "holders": ["n1", "n2", "n3", "n4"]}}
        keeper, kind, cluster = _keeper("n1", nodes, entries, leader=leader)
        keeper.start()
        if leader:
            await wait_until_async(lambda: len(entries["x"]["holders"]) == 2, what="two copies trimmed")
            assert [s[1] for s in kind.said] == [False, False]
        else:
            cluster.apply({"op": "thing.touch", "key": "x"})
            await asyncio.sleep(0)
            assert kind.said == [] and len(entries["x"]["holders"]) == 4
        await keeper.close()


async def test_a_node_that_left_is_dropped_from_the_holders_by_the_leader():
    nodes = _up("n1", "n2", "n3")
    entries = {"x": {"tree": TREE, "holders": ["n1", "n2"]}, "y": {"tree": TREE, "holders": ["n3", "n1"]}}
    keeper, kind, cluster = _keeper("n1", nodes, entries, leader=True)
    keeper.start()
    del nodes["n2"]
    cluster.apply({"op": "node.remove", "id": "n2"})
    await wait_until_async(lambda: ("x", False, "n2", None) in kind.said, what="n2 dropped as a holder")
    assert "n2" not in entries["x"]["holders"]
    await keeper.close()


async def test_an_entry_that_says_the_copy_went_from_here_stops_the_copy_under_way():
    nodes = _up("n1", "n2")
    entries = {"x": {"tree": TREE, "holders": ["n2"]}}
    keeper, kind, cluster = _keeper("n1", nodes, entries)
    started = asyncio.Event()

    async def slow_make(key, entry):
        started.set()
        await asyncio.Event().wait()        # a fetch that never ends by itself
    kind.make = slow_make
    keeper.start()
    await asyncio.wait_for(started.wait(), 5.0)
    first = keeper.replicating["x"]
    cluster.apply({"op": "thing.redo", "key": "x"})
    assert first.cancelling()
    await asyncio.wait({first}, timeout=5.0)
    assert first.cancelled() and kind.said == []        # it never said it holds the copy
    await keeper.close()
