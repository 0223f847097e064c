"""The replicated state machine, command by command (pure: no loop, no disk)."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

import floydd.cluster
from floydd.cluster.state import commands
from floydd.cluster.state.machine import ClusterState, StaleTerm
from floydd.errors import Conflict, InvalidName, InvalidSpec, NotFound
from floydd.model import Job

TERM = 3


def node(nid="n1", gpus=(0, 1), ts=1.0, **kw):
    return {"op": "node.upsert", "id": nid, "name": f"box-{nid}", "address": "10.0.0.1", "cluster_port": 7654,
            "api_port": 7655, "resources": {"gpus": [{"index": g, "name": "A100"} for g in gpus], "cpus": 8},
            "labels": {"room": "b12"}, "ts": ts, **kw}


def submit(key="k1", project="mnist", gpus=1, ts=2.0, **kw):
    return {"op": "job.submit", "idem_key": key, "project": project,
            "spec": {"command": "python train.py", "resources": {"gpus": gpus}}, "origin": "n1", "ts": ts, **kw}


def place(job="mnist/1", nid="n1", gpus=(0,), term=TERM, ts=3.0):
    return {"op": "job.place", "job": job, "node": nid, "gpus": list(gpus), "term": term, "ts": ts}


def update(job="mnist/1", ts=4.0, **kw):
    return {"op": "job.update", "job": job, "ts": ts, **kw}


class Log:
    """Applies commands at increasing indexes, in one term."""

    def __init__(self, state=None, term=TERM):
        self.state, self.index, self.term = state or ClusterState(), 1, term

    def __call__(self, cmd, term=None):
        self.index += 1
        return self.state.apply(cmd, index=self.index, term=term or self.term)


@pytest.fixture
def log():
    log = Log()
    log(node())
    return log


def test_submit_numbers_jobs_per_project_and_records_the_spec(log):
    a = log(submit("a"))
    b = log(submit("b"))
    c = log(submit("c", project="cifar"))
    assert (a["id"], b["id"], c["id"]) == ("mnist/1", "mnist/2", "cifar/1")
    assert a["state"] == "queued" and a["spec"]["command"] == "python train.py"
    assert a["created"] == 2.0 and a["origin"] == "n1" and a["attempts"] == 0


def test_a_retried_submission_with_the_same_idempotency_key_gives_the_same_job(log):
    first = log(submit("same", ts=2.0))
    again = log(submit("same", ts=9.0))
    assert again == first
    assert [j.id for j in log.state.list_jobs()] == ["mnist/1"]
    assert log(submit("other"))["id"] == "mnist/2"


def test_numbers_are_not_reused_after_a_delete(log):
    log(submit("a"))
    log({"op": "job.delete", "job": "mnist/1", "ts": 3.0})
    assert log(submit("b"))["id"] == "mnist/2"
    with pytest.raises(NotFound):
        log.state.job("mnist/1")


def test_an_adopted_job_keeps_its_number_and_later_ones_follow_the_highest(log):
    log(submit("a"))
    assert log(submit("old-5", number=5))["id"] == "mnist/5"
    assert log(submit("old-3", number=3))["id"] == "mnist/3"           # below the counter: free, taken
    assert log(submit("old-3", number=3))["id"] == "mnist/3"           # the same key: the same job
    assert log(submit("b"))["id"] == "mnist/6"
    with pytest.raises(Conflict):
        log(submit("other", number=5))
    for bad in (0, -1, 10**18):
        with pytest.raises(InvalidSpec):
            log(submit(f"bad{bad}", number=bad))
    assert sorted(log.state.jobs) == ["mnist/1", "mnist/3", "mnist/5", "mnist/6"]


def test_placement_moves_a_queued_job_to_starting_with_its_gpus_and_term(log):
    log(submit())
    job = log(place(gpus=(1,)))
    assert (job["state"], job["node"], job["gpus"], job["placed_term"], job["attempts"]) == \
        ("starting", "n1", [1], TERM, 1)
    assert log.state.held_gpus("n1") == {1: "mnist/1"}


def test_fencing_rejects_a_placement_whose_term_is_not_its_entrys(log):
    log(submit())
    with pytest.raises(StaleTerm):
        log(place(term=TERM - 1))          # planned by a former leader, committed now
    with pytest.raises(StaleTerm):
        log(place(term=TERM), term=TERM + 1)
    assert log.state.job("mnist/1").state == "queued"
    assert log.state.held_gpus("n1") == {}


def test_any_leader_action_carrying_a_term_is_fenced(log):
    log(submit())
    with pytest.raises(StaleTerm):
        log(update(state="lost", reason="node gone", term=TERM - 1))
    assert log.state.job("mnist/1").state == "queued"
    assert log(update(state="lost", reason="node gone", term=TERM))["state"] == "lost"
    unfenced = place()
    del unfenced["term"]
    with pytest.raises(InvalidSpec):                # a placement without its fencing token
        log(unfenced)


def test_no_gpu_is_ever_booked_twice(log):
    log(submit("a"))
    log(submit("b"))
    log(place("mnist/1", gpus=(0,)))
    with pytest.raises(Conflict) as exc:
        log(place("mnist/2", gpus=(0,)))
    assert exc.value.code == "gpu_busy"
    assert log.state.job("mnist/2").state == "queued"
    assert log(place("mnist/2", gpus=(1,)))["gpus"] == [1]
    log(submit("c"))
    with pytest.raises(Conflict):
        log(place("mnist/3", gpus=(1,)))


def test_gpus_are_free_again_once_the_job_ends(log):
    log(submit("a"))
    log(submit("b"))
    log(place("mnist/1", gpus=(0,)))
    log(update("mnist/1", state="running"))
    log(update("mnist/1", state="success", exit_code=0, summary={"loss": 0.1}))
    assert log.state.held_gpus("n1") == {}
    assert log(place("mnist/2", gpus=(0,)))["state"] == "starting"


def test_a_placement_is_rechecked_against_current_state(log):
    log(submit("a"))
    log(place())
    with pytest.raises(Conflict) as exc:
        log(place(gpus=(1,)))                     # no longer queued
    assert exc.value.code == "job_not_queued"
    log(submit("b"))
    with pytest.raises(Conflict):
        log(place("mnist/2", gpus=(7,)))          # the node has no GPU 7
    with pytest.raises(NotFound):
        log(place("mnist/2", nid="ghost"))
    with pytest.raises(InvalidSpec):
        log(place("mnist/2", gpus=()))            # wants one GPU
    log({"op": "node.health", "id": "n1", "status": "draining", "ts": 5.0})
    with pytest.raises(Conflict) as exc:
        log(place("mnist/2", gpus=(1,)))
    assert exc.value.code == "node_not_up"


def test_job_state_follows_the_transitions_and_final_is_final(log):
    log(submit())
    with pytest.raises(Conflict):
        log(update(state="running"))               # queued cannot jump to running
    log(place())
    job = log(update(state="running", ts=5.0))
    assert job["started"] == 5.0
    again = log(update(state="running", ts=6.0))   # a retried update is a no-op
    assert again["state"] == "running" and again["started"] == 5.0
    done = log(update(state="failed", reason="exit 1", exit_code=1, ts=7.0))
    assert (done["ended"], done["exit_code"], done["reason"]) == (7.0, 1, "exit 1")
    with pytest.raises(Conflict):
        log(update(state="running"))
    assert log(update(output_version="mnist/1/output:1"))["output_version"] == "mnist/1/output:1"


def test_updates_are_fenced_by_attempt_and_node(log):
    log(submit())
    log(place())
    with pytest.raises(Conflict) as exc:
        log(update(state="running", attempt=0))
    assert exc.value.code == "stale_attempt"
    with pytest.raises(Conflict) as exc:
        log(update(state="running", node="n2"))
    assert exc.value.code == "wrong_node"
    assert log(update(state="running", attempt=1, node="n1"))["state"] == "running"


def test_a_lost_placement_is_requeued_and_placed_again_as_a_new_attempt(log):
    log(node("n2", gpus=(0,)))
    log(submit())
    log(place())
    job = log(update(state="queued", reason="node n1 lost"))
    assert (job["node"], job["gpus"], log.state.held_gpus("n1")) == (None, [], {})
    assert log(place(nid="n2"))["attempts"] == 2


def test_summaries_merge_and_deleting_an_active_job_is_refused(log):
    log(submit())
    log(place())
    log(update(summary={"loss": 0.5}))
    assert log(update(summary={"acc": 0.9}))["summary"] == {"loss": 0.5, "acc": 0.9}
    with pytest.raises(Conflict):
        log({"op": "job.delete", "job": "mnist/1", "ts": 9.0})


def test_nodes_upsert_health_and_removal_with_a_tombstone(log):
    log(node("n2", gpus=()))
    log({"op": "node.health", "id": "n2", "status": "up", "usage": {"gpu_util": [0.5]}, "ts": 20.0})
    health = log.state.node_health(now=25.0, stale_after=10.0)
    assert health == {"n1": "stale", "n2": "up"}
    log({"op": "node.remove", "id": "n2", "ts": 30.0})
    assert [n["id"] for n in log.state.list_nodes()] == ["n1"]
    with pytest.raises(Conflict) as exc:
        log(node("n2"))
    assert exc.value.code == "node_removed"
    assert log(node("n2", rejoin=True))["status"] == "up"
    assert "n2" not in log.state.removed
    with pytest.raises(NotFound):
        log({"op": "node.health", "id": "ghost", "status": "up", "ts": 1.0})


def test_dataset_versions_count_up_never_reuse_numbers_and_track_holders(log):
    tree = "ab" * 32
    v1 = log({"op": "dataset.add_version", "name": "mnist", "tree": tree, "size": 10, "files": 2,
              "node": "n1", "idem_key": "up-1", "ts": 1.0})
    assert (v1["ref"], v1["holders"]) == ("mnist:1", ["n1"])
    assert log({"op": "dataset.add_version", "name": "mnist", "tree": tree, "idem_key": "up-1", "ts": 2.0}) == v1
    v2 = log({"op": "dataset.add_version", "name": "mnist", "tree": "cd" * 32, "ts": 3.0})
    assert v2["version"] == 2
    held = log({"op": "dataset.holders", "name": "mnist", "version": 2, "node": "n9", "holds": True, "ts": 4.0})
    assert held["holders"] == ["n9"]
    log({"op": "dataset.delete", "name": "mnist", "ts": 5.0})
    assert log.state.list_datasets() == []
    with pytest.raises(NotFound):
        log({"op": "dataset.delete", "name": "mnist", "version": 1, "ts": 6.0})
    v3 = log({"op": "dataset.add_version", "name": "mnist", "tree": tree, "idem_key": "up-1", "ts": 7.0})
    assert v3["version"] == 3                       # the key died with its version; 1 is never reused
    with pytest.raises(InvalidName):
        log({"op": "dataset.add_version", "name": "../etc", "tree": tree, "ts": 8.0})


def test_malformed_commands_are_rejected_before_anything_changes(log):
    before = log.state.snapshot()
    bad = [{"op": "job.submit", "idem_key": "x", "project": "p", "spec": {}},            # no ts
           {"op": "job.nuke", "ts": 1.0},
           submit(extra=1),
           submit(spec={"weird": {1: 2}}),
           {**place(), "gpus": [-1]},
           {**place(), "gpus": "0"},
           submit(project="Not A Project"),
           {"op": "node.health", "id": "n1", "status": "sleeping", "ts": 1.0},
           node(resources={"gpus": ["zero"]})]
    for cmd in bad:
        with pytest.raises((InvalidSpec, InvalidName)):
            log(cmd)
    assert log.state.snapshot() == before


def test_snapshot_restore_round_trips_and_empty_bytes_mean_a_new_cluster(log):
    log(submit("a"))
    log(place())
    log(submit("b", project="cifar"))
    data = log.state.snapshot()
    other = ClusterState()
    other.restore(data)
    assert other.snapshot() == data
    assert other.held_gpus("n1") == {0: "mnist/1"}
    assert Log(other)(submit("a")) == log.state.stored_job("mnist/1")      # idempotency survives
    other.restore(b"")
    assert other.list_jobs() == [] and other.nodes == {}
    assert b"pickle" not in data and msgpack.unpackb(data)["v"] == 1


def test_restore_refuses_a_snapshot_of_another_version():
    with pytest.raises(InvalidSpec):
        ClusterState().restore(msgpack.packb({"v": 99}))


def test_queries_answer_named_reads(log):
    log(submit("a"))
    st = log.state
    assert [Job.from_dict(j) for j in st.query("jobs")] == st.list_jobs()
    assert st.query("job", {"job": "mnist/1"})["id"] == "mnist/1"
    assert st.query("counts") == {"nodes": 1, "jobs": 1, "archived": 0, "datasets": 0}
    assert st.query("jobs", {"states": ["running"]}) == []
    with pytest.raises(InvalidSpec):
        st.query("drop tables")


def test_reads_are_frozen_or_copies():
    log = Log()
    log(node())
    log(submit())
    job = log.state.job("mnist/1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = "hacked"
    with pytest.raises(TypeError):
        job.stored_spec["command"] = "rm -rf /"
    stored = log.state.stored_job("mnist/1")
    stored["state"] = "hacked"
    stored["spec"]["command"] = "rm -rf /"
    assert log.state.job("mnist/1").state == "queued"
    assert log.state.job("mnist/1").stored_spec["command"] == "python train.py"


def test_commands_round_trip_through_msgpack_and_oversized_ones_are_refused():
    cmd = submit()
    assert commands.decode(commands.encode(cmd)) == cmd
    with pytest.raises(InvalidSpec):
        commands.encode(submit(spec={"blob": "x" * 300_000}))
    with pytest.raises(InvalidSpec):
        commands.decode(b"\xc1")


def test_the_state_machine_and_autopilot_are_pure():
    """Every module of ``cluster/state/`` (the state, its commands, authz, people ...) and the
    autopilot: no I/O, no clock, no randomness, as the raft core (tests/unit/raft/test_raft_purity.py)."""
    state_dir = Path(floydd.cluster.state.machine.__file__).parent
    everything = ", ".join(f"floydd.cluster.state.{p.stem}" for p in sorted(state_dir.glob("[a-z]*.py")))
    code = (f"import sys, {everything}, floydd.cluster.driver.autopilot; "
            "print(','.join(sorted({'asyncio', 'aiohttp', 'sqlite3', 'socket', 'pickle'} & set(sys.modules))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    forbidden = {"asyncio", "aiohttp", "sqlite3", "socket", "time", "random", "threading", "os", "pickle",
                 "datetime", "subprocess"}
    paths = [*sorted(state_dir.glob("*.py")), state_dir.parent / "driver" / "autopilot.py"]
    assert len(paths) > 15 and any(p.stem == "authz" for p in paths)      # the state's parts are all checked
    formats_only = {("audit.py", "datetime")}           # writes a recorded ts as a date, reads no clock
    for path in paths:
        for tree_node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in tree_node.names] if isinstance(tree_node, ast.Import) else \
                [tree_node.module or ""] if isinstance(tree_node, ast.ImportFrom) else []
            bad = {n.split(".")[0] for n in names} & forbidden - {m for f, m in formats_only if f == path.name}
            assert not bad, f"{path.name} imports {names}"


def test_a_job_keeps_a_bounded_history_of_what_the_cluster_decided():
    log = Log()
    log(node())
    log(submit())
    log(place())
    log(update(state="queued", reason="node box-n1 went silent before the job started", attempt=1, node="n1"))
    log(place(ts=5.0))
    log(update(stop_requested="stopped by user", ts=6.0))
    history = [text for _ts, text in log.state.job("mnist/1").history]
    assert history == ["submitted on box-n1",
                       "placed on box-n1 (GPU 0) by the leader of term 3, attempt 1",
                       "starting → queued: node box-n1 went silent before the job started",
                       "placed on box-n1 (GPU 0) by the leader of term 3, attempt 2",
                       "stop requested: stopped by user"]
    for attempt in range(3, 23):        # twenty more requeues: 40 more lines
        log(update(state="queued", reason="again", attempt=attempt - 1, node="n1", ts=10.0 + attempt))
        log(place(ts=10.5 + attempt))
    history = log.state.job("mnist/1").history
    assert len(history) == 32 and history[-1][1].endswith("attempt 22")
