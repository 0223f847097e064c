"""Properties of the state machine over random command logs (hypothesis)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.cluster.state.machine import ClusterState, StaleTerm
from floydd.model import ACTIVE_STATES
from floydd.errors import FloyddError

NODES = ("n1", "n2", "n3")
PROJECTS = ("p", "q")
STATES = ("starting", "running", "success", "failed", "stopped", "queued", "lost")
ts = st.floats(min_value=0, max_value=1e6, allow_nan=False)
job_ids = st.builds(lambda p, n: f"{p}/{n}", st.sampled_from(PROJECTS), st.integers(1, 6))

node_cmd = st.builds(lambda nid, gpus, ts, rejoin: {
    "op": "node.upsert", "id": nid, "name": nid, "address": "10.0.0.1", "cluster_port": 7654,
    "resources": {"gpus": sorted(gpus)}, "ts": ts, **({"rejoin": True} if rejoin else {})},
    st.sampled_from(NODES), st.sets(st.integers(0, 3), max_size=4), ts, st.booleans())
health_cmd = st.builds(lambda nid, status, ts: {"op": "node.health", "id": nid, "status": status, "ts": ts},
                       st.sampled_from(NODES), st.sampled_from(("up", "up", "draining", "down")), ts)
remove_cmd = st.builds(lambda nid, ts: {"op": "node.remove", "id": nid, "ts": ts}, st.sampled_from(NODES), ts)
submit_cmd = st.builds(lambda key, project, gpus, ts: {
    "op": "job.submit", "idem_key": f"k{key}", "project": project,
    "spec": {"command": "train", "resources": {"gpus": gpus}}, "ts": ts},
    st.integers(0, 12), st.sampled_from(PROJECTS), st.integers(0, 2), ts)
place_cmd = st.builds(lambda job, nid, gpus, term, ts: {
    "op": "job.place", "job": job, "node": nid, "gpus": gpus, "term": term, "ts": ts},
    job_ids, st.sampled_from(NODES), st.lists(st.integers(0, 3), max_size=2), st.integers(1, 3), ts)
update_cmd = st.builds(lambda job, state, ts: {"op": "job.update", "job": job, "state": state, "ts": ts},
                       job_ids, st.sampled_from(STATES), ts)
delete_cmd = st.builds(lambda job, ts: {"op": "job.delete", "job": job, "ts": ts}, job_ids, ts)
dataset_cmd = st.builds(lambda name, tree, ts: {"op": "dataset.add_version", "name": name, "tree": tree * 32,
                                                "ts": ts},
                        st.sampled_from(("a", "b")), st.sampled_from(("ab", "cd")), ts)
command = st.one_of(node_cmd, health_cmd, remove_cmd, submit_cmd, submit_cmd, place_cmd, place_cmd,
                    place_cmd, update_cmd, update_cmd, delete_cmd, dataset_cmd)
# A log: (command, term of its entry), terms never decrease along the log.
logs = st.lists(st.tuples(command, st.integers(0, 1)), max_size=60).map(
    lambda items: [(cmd, 1 + sum(bump for _, bump in items[:i + 1])) for i, (cmd, _) in enumerate(items)])


def run(state: ClusterState, log, start: int = 0) -> list:
    results = []
    for i, (cmd, term) in enumerate(log, start=start):
        try:
            results.append(("ok", state.apply(cmd, index=i + 2, term=term)))
        except FloyddError as exc:
            results.append(("rejected", type(exc).__name__, exc.code))
    return results


@settings(max_examples=150, deadline=None)
@given(logs)
def test_the_same_log_gives_the_same_state_and_results(log):
    a, b = ClusterState(), ClusterState()
    assert run(a, log) == run(b, log)
    assert a.snapshot() == b.snapshot()


@settings(max_examples=150, deadline=None)
@given(logs, st.data())
def test_a_snapshot_taken_anywhere_restores_to_the_same_future(log, data):
    cut = data.draw(st.integers(0, len(log)))
    straight = ClusterState()
    head = run(straight, log[:cut])
    restored = ClusterState()
    restored.restore(straight.snapshot())
    tail_restored = run(restored, log[cut:], start=cut)
    tail_straight = run(straight, log[cut:], start=cut)
    assert tail_restored == tail_straight
    assert restored.snapshot() == straight.snapshot()
    assert len(head) == cut


@settings(max_examples=200, deadline=None)
@given(logs)
def test_no_gpu_is_double_booked_and_each_idempotency_key_makes_one_job(log):
    state = ClusterState()
    for i, (cmd, term) in enumerate(log):
        before = state.snapshot()
        try:
            state.apply(cmd, index=i + 2, term=term)
        except FloyddError as exc:
            assert state.snapshot() == before, f"rejected {cmd['op']} changed the state"
            if cmd["op"] == "job.place" and cmd["term"] != term:
                assert isinstance(exc, StaleTerm)
        else:
            assert not (cmd["op"] == "job.place" and cmd["term"] != term), "a stale placement got in"
        booked = Counter((j.node, g) for j in state.jobs.values() if j.state in ACTIVE_STATES
                         for g in j.gpu_ids)
        assert all(n == 1 for n in booked.values()), f"double-booked: {booked}"
        keys = Counter(j.idem_key for j in state.jobs.values())
        assert all(n == 1 for n in keys.values())
        for job in state.jobs.values():
            assert state.idem[job.idem_key] == ["job", job.id]


@settings(max_examples=100, deadline=None)
@given(logs, st.integers(0, 12))
def test_resubmitting_any_key_returns_the_job_it_made(log, key):
    state = ClusterState()
    run(state, log)
    retry = {"op": "job.submit", "idem_key": f"k{key}", "project": "p", "spec": {"command": "again"}, "ts": 1.0}
    before = {k: v.to_dict() for k, v in state.jobs.items()}
    existing = state.idem.get(f"k{key}")
    result = state.apply(retry, index=999, term=99)
    if existing is not None:
        assert result == before[existing[1]]
        assert len(state.jobs) == len(before)
    else:
        assert result["spec"] == {"command": "again"} and len(state.jobs) == len(before) + 1
