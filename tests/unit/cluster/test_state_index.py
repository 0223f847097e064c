"""The state's index of held GPUs, cores and memory set aside, and loads (what placement reads
every round) always equals a recomputation from the jobs, after any command log and after a
restore (hypothesis); and a placement is refused where it would set aside more cores or
memory than a node has."""

from __future__ import annotations

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from floydd.cluster.state.machine import ClusterState
from floydd.model import ACTIVE_STATES, TRANSITIONS
from floydd.errors import FloyddError
from tests.unit.cluster.test_state_properties import (NODES, PROJECTS, STATES, delete_cmd, health_cmd, node_cmd,
                                                      place_cmd, remove_cmd, ts, update_cmd)
from tests.unit.scheduler import _reference as reference

submit_cmd = st.builds(lambda key, project, gpus, nodes, cpus, memory, ts: {
    "op": "job.submit", "idem_key": f"k{key}", "project": project,
    "spec": {"command": "train", "resources": {"gpus": gpus, "nodes": nodes, **cpus, **memory}}, "ts": ts},
    st.integers(0, 30), st.sampled_from(PROJECTS), st.integers(0, 2), st.sampled_from((1, 1, 2, 3)),
    st.sampled_from(({}, {"cpus": 1}, {"cpus": 0.5}, {"cpus": "x"})), st.sampled_from(({}, {"memory": 3 << 30})), ts)
blind = st.one_of(node_cmd, health_cmd, remove_cmd, place_cmd, update_cmd, delete_cmd)


def aimed(draw, state: ClusterState) -> dict:
    """A command likely to be accepted: a placement of a job on up nodes' GPUs, a report on a
    job or on one part of a gang (a requeue among them)."""
    if not state.jobs:
        return draw(submit_cmd)
    kind = draw(st.sampled_from(("place", "place", "update", "part", "part")))
    stored = {k: j.to_dict() for k, j in state.jobs.items()}
    fit = [k for k, j in stored.items() if j["state"] == "queued" if kind == "place"] + \
        [k for k, j in stored.items() if j["state"] in ACTIVE_STATES and j.get("parts") if kind == "part"]
    key = draw(st.sampled_from(sorted(fit or state.jobs)))
    job, now = stored[key], draw(ts)
    if kind == "place":
        wanted = job["spec"]["resources"]
        up = sorted(n for n, node in state.nodes.items() if node["status"] == "up")
        nodes = draw(st.permutations(up))[:wanted["nodes"]] if len(up) >= wanted["nodes"] else NODES[:wanted["nodes"]]
        parts = []
        for nid in nodes:
            have = (state.nodes.get(nid) or {}).get("resources", {}).get("gpus") or [0, 1]
            size = min(wanted["gpus"], len(have))
            parts.append({"node": nid, "gpus": draw(st.lists(st.sampled_from(have), min_size=size, max_size=size,
                                                             unique=True))})
        return {"op": "job.place", "job": key, "node": parts[0]["node"], "gpus": parts[0]["gpus"], "term": 1,
                "ts": now, **({"parts": parts} if len(parts) > 1 else {})}
    if kind == "part" and job.get("parts"):
        rank = draw(st.integers(0, len(job["parts"]) - 1))
        return {"op": "job.update", "job": key, "rank": rank, "ts": now,
                "state": draw(_next_state(job["parts"][rank]["state"]))}
    return {"op": "job.update", "job": key, "state": draw(_next_state(job["state"], requeue=True)), "ts": now}


def _next_state(old: str, requeue: bool = False) -> st.SearchStrategy[str]:
    """Mostly a state ``old`` may move to (a requeue among them), sometimes any."""
    allowed = sorted(TRANSITIONS[old]) + (["queued"] if requeue and old == "starting" else [])
    return st.sampled_from(allowed) if allowed and not old == "queued" else st.sampled_from(STATES)


def apply(state: ClusterState, cmd: dict, index: int) -> str:
    """Apply ``cmd`` at its own term (no placement refused as stale); what happened, in short."""
    try:
        state.apply(cmd, index=index, term=cmd.get("term", 1))
    except FloyddError as exc:
        return f"refused {cmd['op']}: {exc.code}"
    return cmd["op"] + (" (a gang)" if cmd.get("parts") else "") + (" (a part)" if "rank" in cmd else "") + \
        (f" to {cmd['state']}" if "state" in cmd else "")


@st.composite
def logs(draw) -> list[dict]:
    """Commands, each drawn against the state the ones before it made (kept in a shadow)."""
    shadow, log = ClusterState(), []
    for nid in NODES:
        sized = draw(st.sampled_from(({}, {"cpus": 2, "memory": 8 << 30})))
        log.append(draw(node_cmd.map(lambda cmd, nid=nid: {**cmd, "id": nid, "name": nid, "rejoin": True,
                                                           "resources": {**cmd["resources"], **sized}})))
        apply(shadow, log[-1], len(log))
    for _ in range(draw(st.integers(0, 60))):
        choice = draw(st.sampled_from(("blind", "submit", "aimed", "aimed", "aimed", "aimed")))
        cmd = draw(blind) if choice == "blind" else draw(submit_cmd) if choice == "submit" else aimed(draw, shadow)
        log.append(cmd)
        apply(shadow, cmd, len(log))
    return log


def from_scratch(state: ClusterState) -> tuple[dict, dict, dict]:
    """Node id -> held GPUs, node id -> active jobs there and node id -> (thousandths of a
    core, bytes) they asked for, recomputed from every job."""
    load: dict = {}
    aside: dict = {}
    for job in (j.to_dict() for j in state.jobs.values()):
        if job["state"] in ACTIVE_STATES:
            resources = job["spec"].get("resources") or {}
            cpus = resources.get("cpus") if isinstance(resources.get("cpus"), (int, float)) else 0
            for nid in [p["node"] for p in job.get("parts") or ()] or [job["node"]]:
                load[nid] = load.get(nid, 0) + 1
                cpu, memory = aside.get(nid, (0, 0))
                aside[nid] = (cpu + round(cpus * 1000), memory + resources.get("memory", 0))
    held = {nid: reference.held_gpus(state, nid) for nid in load}
    return {nid: gpus for nid, gpus in held.items() if gpus}, load, aside


def assert_index_is_fresh(state: ClusterState) -> None:
    held, load, aside = from_scratch(state)
    assert (state.active_index.held, state.active_index.load) == (held, load)
    assert set(state.active_index.active) == {k for k, j in state.jobs.items() if j.state in ACTIVE_STATES}
    for nid in (*NODES, None, "elsewhere"):
        assert (state.held_gpus(nid), state.active_index.node_load(nid)) == (held.get(nid, {}), load.get(nid, 0))
        assert state.active_index.set_aside(nid) == aside.get(nid, (0, 0))
    assert not any(v == 0 for v in (*state.active_index.cpu.values(), *state.active_index.memory.values()))   # no empty entries
    assert sorted(state.active_index.busy_nodes(), key=str) == sorted(load, key=str)


@settings(max_examples=300, deadline=None)
@given(logs())
def test_the_index_equals_a_recomputation_after_every_command(log):
    state = ClusterState()
    for i, cmd in enumerate(log):
        apply(state, cmd, i + 1)
        assert_index_is_fresh(state)
    restored = ClusterState()
    restored.restore(state.snapshot())
    assert_index_is_fresh(restored)
    assert (restored.active_index.held, restored.active_index.load) == (state.active_index.held, state.active_index.load)
    restored.restore(b"")
    assert (restored.active_index.held, restored.active_index.load, restored.active_index.active) == ({}, {}, {})


@pytest.mark.parametrize("what", ["job.place", "job.place (a gang)", "job.update (a part) to running",
                                  "job.update (a part) to failed", "job.update to queued", "job.update to running",
                                  "job.update to stopped", "job.delete", "node.remove"])
def test_the_logs_reach_what_the_index_must_follow(what):
    """The strategy itself: gangs placed, parts reported, jobs requeued, ended and deleted
    (searched for, not counted in a fixed number of examples: how many examples a run draws
    is hypothesis's business, and on a loaded worker the rarest of these was missed)."""
    def reaches(log) -> bool:
        state = ClusterState()
        return what in {apply(state, cmd, i + 1) for i, cmd in enumerate(log)}

    find(logs(), reaches, settings=settings(max_examples=2000, deadline=None, database=None, derandomize=True,
                                            phases=[Phase.generate]))


def test_a_removed_node_that_rejoins_still_has_its_gpus_held():
    state = ClusterState()
    node = {"op": "node.upsert", "id": "n1", "name": "n1", "address": "10.0.0.1", "cluster_port": 1,
            "resources": {"gpus": [0, 1]}, "ts": 1.0}
    for i, cmd in enumerate((node, {"op": "job.submit", "idem_key": "a", "project": "p",
                                    "spec": {"resources": {"gpus": 1}}, "ts": 1.0},
                             {"op": "job.place", "job": "p/1", "node": "n1", "gpus": [1], "term": 1, "ts": 1.0},
                             {"op": "node.remove", "id": "n1", "ts": 2.0}, {**node, "rejoin": True, "ts": 3.0})):
        state.apply(cmd, index=i + 1, term=1)
    assert (state.held_gpus("n1"), state.active_index.node_load("n1")) == ({1: "p/1"}, 1)
    state.apply({"op": "job.update", "job": "p/1", "state": "queued", "ts": 4.0}, index=9, term=1)   # requeue
    assert (state.held_gpus("n1"), state.active_index.node_load("n1")) == ({}, 0)


def test_a_placement_that_would_set_aside_more_cores_or_memory_than_a_node_has_is_refused():
    state = ClusterState()
    cmds = [{"op": "node.upsert", "id": "n1", "name": "n1", "address": "10.0.0.1", "cluster_port": 1,
             "resources": {"gpus": [], "cpus": 2, "memory": 8 << 30}, "ts": 1.0},
            {"op": "node.upsert", "id": "n2", "name": "n2", "address": "10.0.0.2", "cluster_port": 1,
             "resources": {"gpus": []}, "ts": 1.0}]                  # n2 reported neither: never short
    for i, asked in enumerate(({"cpus": 1.5}, {"cpus": 1}, {"memory": 6 << 30}, {"memory": 4 << 30}, {"cpus": 0.5},
                               {})):
        cmds.append({"op": "job.submit", "idem_key": f"k{i}", "project": "p",
                     "spec": {"resources": {"gpus": 0, **asked}}, "ts": 1.0})
    for i, cmd in enumerate(cmds):
        state.apply(cmd, index=i + 1, term=1)

    def place(key: str, node: str = "n1") -> str:
        try:
            state.apply({"op": "job.place", "job": key, "node": node, "gpus": [], "term": 1, "ts": 2.0},
                        index=99, term=1)
        except FloyddError as exc:
            return exc.code + ": " + exc.message
        return "placed"

    assert place("p/1") == "placed"
    assert place("p/2") == "no_room: node n1 has 0.5 CPUs of 2 CPUs free; job p/2 asks for 1 CPU"
    assert place("p/2", "n2") == "placed"
    assert place("p/3") == "placed"
    assert place("p/4") == "no_room: node n1 has 2 GiB of 8 GiB free; job p/4 asks for 4 GiB"
    assert (place("p/5"), place("p/6")) == ("placed", "placed")     # the last half core; a job asking none
    assert state.active_index.set_aside("n1") == (2000, 6 << 30)
    state.apply({"op": "job.update", "job": "p/3", "state": "stopped", "ts": 3.0}, index=100, term=1)
    assert place("p/4") == "placed" and state.active_index.set_aside("n1") == (2000, 4 << 30)
