"""One builder of node snapshots: from the state's index it gives what the leader's old
builder gave (tests/unit/scheduler/_reference.py), and a box alone uses it as it is."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
import sys
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.cluster.state.machine import ClusterState
from floydd.scheduler.placer import ClusterScheduler
from floydd.scheduler import NodeSnapshot, node_snapshots
from tests.unit.cluster.test_state_index import apply, from_scratch, logs
from tests.unit.scheduler import _reference as reference

ROOT = Path(__file__).resolve().parents[3]


@settings(max_examples=150, deadline=None)
@given(logs(), st.floats(0, 1.1e6), st.sampled_from((5.0, 1e5)))
def test_the_leaders_snapshots_are_what_they_were(log, now, stale_after):
    state = ClusterState()
    for i, cmd in enumerate(log):
        apply(state, cmd, i + 1)
    cluster = SimpleNamespace(state=state, config=SimpleNamespace(stale_after=stale_after))
    _, _, aside = from_scratch(state)
    expected = {}                       # the old snapshots, with the cores and memory of issue 12
    for nid, snap in reference.snapshots(state, now, stale_after).items():
        resources = state.nodes[nid]["resources"]
        cpus, memory = resources.get("cpus"), resources.get("memory")
        cpu_held, memory_held = aside.get(nid, (0, 0))
        expected[nid] = replace(snap, cpu_milli=None if cpus is None else cpus * 1000, cpu_held=cpu_held,
                                memory=memory, memory_held=memory_held)
    assert ClusterScheduler(cluster).snapshots(now) == expected


def test_nodes_that_share_a_name_are_told_apart_by_their_ids():
    state = ClusterState()
    for i, (nid, name, gpus, ts) in enumerate((("aaaaaaaa-1", "box", [0, 1], 100.0), ("bbbbbbbb-2", "box", [], 50.0),
                                               ("cccccccc-3", "other", [{"index": 3, "name": "H200"}], 100.0))):
        state.apply({"op": "node.upsert", "id": nid, "name": name, "address": "10.0.0.1", "cluster_port": 1,
                     "resources": {"gpus": gpus}, "ts": ts}, index=i + 1, term=1)
    built = node_snapshots(state.nodes, health=state.node_health(100.0, 10.0))
    assert built == reference.snapshots(state, 100.0, 10.0) == {
        "aaaaaaaa-1": NodeSnapshot(name="box(aaaaaaaa)", gpu_ids=(0, 1)),
        "bbbbbbbb-2": NodeSnapshot(name="box(bbbbbbbb)", healthy=False),
        "cccccccc-3": NodeSnapshot(name="other", gpu_ids=(3,))}


def test_a_box_alone_builds_its_snapshot_the_same_way():
    held = {1: "p/4"}
    me = node_snapshots({"local": {"name": "box-a", "resources": {"gpus": [0, 1, 2]}}}, held={"local": held})["local"]
    assert me == NodeSnapshot(name="box-a", gpu_ids=(0, 1, 2), held={1: "p/4"}, healthy=True, load=0)
    held[2] = "p/5"
    assert me.held == {1: "p/4"}                # a copy: later changes of the source do not show


def test_the_scheduler_loads_no_io_library():
    code = "import sys, json, floydd.scheduler; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = set(json.loads(out.stdout))
    assert not loaded & {"asyncio", "aiohttp", "sqlite3", "msgpack", "textual", "floydd.cluster", "floydd.jobs"}


def test_a_node_with_store_trouble_is_not_healthy_and_says_why():
    nodes = {"a": {"name": "a", "resources": {"gpus": [0]}}, "b": {"name": "b", "resources": {}}}
    snaps = node_snapshots(nodes, trouble={"a": "disk full"})
    assert (snaps["a"].healthy, snaps["a"].trouble) == (False, "disk full")
    assert (snaps["b"].healthy, snaps["b"].trouble) == (True, "")
