"""The replicated state under outages: unknown runs, reruns by restart policy, boxes' notes on
replaced runs, the leader's suspect mark, and GPU fencing from the processes a box reports."""

from __future__ import annotations

import pytest

from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, InvalidSpec


class Log:
    def __init__(self) -> None:
        self.state, self.index = ClusterState(), 0

    def __call__(self, op: str, ts: float = 1.0, **fields):
        self.index += 1
        return self.state.apply({"op": op, "ts": ts, **fields}, index=self.index, term=1)

    def node(self, nid: str, gpus=(0, 1), **fields):
        return self("node.upsert", id=nid, name=f"box-{nid}", address="10.0.0.1", cluster_port=1,
                    resources={"gpus": list(gpus)}, **fields)

    def job(self, gpus: int = 1, nodes: int = 1, **restart) -> str:
        spec = {"command": "train", "code_tree": "ab" * 32, "resources": {"gpus": gpus, "nodes": nodes}}
        if restart:
            spec["restart"] = restart
        return self("job.submit", idem_key=f"k{self.index}", project="p", spec=spec)["id"]

    def running(self, key: str, node: str = "n1", gpus=(0,)) -> dict:
        self("job.place", job=key, node=node, gpus=list(gpus), term=1)
        return self("job.update", job=key, state="running", attempt=self.state.jobs[key].attempts, node=node)


@pytest.fixture
def log() -> Log:
    log = Log()
    log.node("n1")
    log.node("n2")
    return log


def test_an_unknown_run_keeps_its_gpus_and_carries_on_when_its_box_reports(log):
    key = log.job()
    log.running(key)
    job = log("job.update", ts=5.0, job=key, state="unknown", attempt=1, silent=["n1"], reason="box-n1 out of touch")
    assert (job["state"], job["unknown_since"], job["started"]) == ("unknown", 5.0, 1.0)
    assert log.state.held_gpus("n1") == {0: key}
    job = log("job.update", ts=9.0, job=key, state="running", attempt=1, node="n1", reason="back")
    assert (job["state"], job["unknown_since"], job["started"], job["attempts"]) == ("running", None, 1.0, 1)
    assert log("job.update", job=key, state="success", attempt=1, node="n1")["state"] == "success"


def test_a_lost_run_reruns_under_the_default_policy_until_its_attempts_are_spent(log):
    key = log.job(max_attempts=2)
    log.running(key)
    log("job.update", job=key, output_version="p/1/output:1", attempt=1, node="n1")
    job = log("job.update", ts=7.0, job=key, state="lost", attempt=1, reason="box-n1 silent")
    assert (job["state"], job["reruns"], job["node"], job["gpus"], job["started"]) == ("queued", 1, None, [], None)
    assert "run 2 of at most 2 follows (--restart on-lost), from the /output of p/1/output:1" in job["history"][-1][1]
    assert log.state.held_gpus("n1") == {} and job["output_version"] == "p/1/output:1"
    log.running(key, node="n2")
    job = log("job.update", job=key, state="lost", attempt=2, reason="again")
    assert (job["state"], job["attempts"], job["reruns"]) == ("lost", 2, 1)


@pytest.mark.parametrize("policy,state,reruns", [
    ("on-lost", "failed", False), ("on-lost", "lost", True), ("on-failure", "failed", True),
    ("on-failure", "lost", True), ("on-failure", "timeout", False), ("never", "lost", False),
    ("on-failure", "stopped", False),
])
def test_the_policy_decides_what_reruns(log, policy, state, reruns):
    key = log.job(policy=policy)
    log.running(key)
    job = log("job.update", job=key, state=state, attempt=1, node="n1", exit_code=1, reason="it ended")
    assert (job["state"] == "queued") == reruns
    if reruns:
        assert job["exit_code"] is None and "it runs again" in job["reason"]


def test_a_stop_asked_for_is_never_rerun(log):
    key = log.job(policy="on-failure")
    log.running(key)
    log("job.update", job=key, stop_requested="stopped by user")
    assert log("job.update", job=key, state="failed", attempt=1, node="n1")["state"] == "failed"


def test_a_gang_waits_for_its_silent_part_and_its_loss_names_that_box(log):
    log.node("n3")
    key = log.job(gpus=0, nodes=2, policy="never")
    log("job.place", job=key, node="n1", gpus=[], parts=[{"node": "n1", "gpus": []}, {"node": "n3", "gpus": []}],
        term=1)
    log("job.update", job=key, rank=0, node="n1", attempt=1, state="running")
    log("job.update", job=key, rank=1, node="n3", attempt=1, state="running")
    job = log("job.update", job=key, state="unknown", attempt=1, silent=["n3"], reason="box-n3 out of touch")
    assert [p["state"] for p in job["parts"]] == ["running", "unknown"]
    job = log("job.update", job=key, rank=0, node="n1", attempt=1, state="failed", reason="peer vanished")
    assert job["state"] == "unknown"                        # it waits for the silent part
    job = log("job.update", job=key, rank=1, node="n3", attempt=1, state="running", reason="back")
    assert (job["state"], job["reason"]) == ("failed", "rank 0 on box-n1 failed: peer vanished")

    other = log.job(gpus=0, nodes=2, policy="never")
    log("job.place", job=other, node="n1", gpus=[], parts=[{"node": "n1", "gpus": []}, {"node": "n3", "gpus": []}],
        term=1)
    log("job.update", job=other, rank=0, node="n1", attempt=1, state="running")
    log("job.update", job=other, state="unknown", attempt=1, silent=["n3"])
    log("job.update", job=other, rank=0, node="n1", attempt=1, state="failed", reason="peer vanished")
    job = log("job.update", job=other, state="lost", attempt=1, silent=["n3"], reason="box box-n3 silent for 60s")
    assert (job["state"], job["reason"]) == ("lost", "box box-n3 silent for 60s")
    assert [p["state"] for p in job["parts"]] == ["failed", "lost"]


def test_a_box_notes_a_replaced_run_without_changing_the_job(log):
    key = log.job()
    log.running(key)
    log("job.update", job=key, state="lost", attempt=1)        # rerun: queued at attempt 1
    log.running(key, node="n2")
    before = log.state.stored_job(key)
    job = log("job.update", ts=3.0, job=key, attempt=1, node="n1", note="stopped its run of attempt 1: replaced")
    assert job["history"][-1] == [3.0, "box-n1: stopped its run of attempt 1: replaced"]
    assert {k: v for k, v in job.items() if k not in ("history", "updated")} == \
        {k: v for k, v in before.items() if k not in ("history", "updated")}
    with pytest.raises(Conflict):                              # a note from the future
        log("job.update", job=key, attempt=3, node="n1", note="?")
    with pytest.raises(InvalidSpec):                           # a note goes alone
        log("job.update", job=key, attempt=2, node="n2", note="x", state="success")


def test_suspect_is_the_leaders_word_and_the_boxs_heartbeat_ends_it(log):
    log("node.health", ts=2.0, id="n1", status="up")
    log("node.health", ts=4.0, id="n1", status="suspect")
    node = log.state.nodes["n1"]
    assert (node["status"], node["last_heartbeat"], node["suspect_since"]) == ("suspect", 2.0, 4.0)
    assert log.state.node_health(5.0, 20.0)["n1"] == "suspect"
    key = log.job()
    with pytest.raises(Conflict):
        log("job.place", job=key, node="n1", gpus=[0], term=1)
    log("node.health", id="n2", status="off")
    log("node.health", id="n2", status="suspect")              # a box cleanly off stays off
    assert log.state.nodes["n2"]["status"] == "off"
    log("node.health", ts=6.0, id="n1", status="up", procs=[])
    assert log.state.nodes["n1"]["status"] == "up"


def test_gpus_of_a_given_up_run_stay_held_until_its_box_reports_them_gone(log):
    key = log.job()
    log.running(key)
    log("job.update", job=key, state="lost", attempt=1)        # rerun: queued, its GPU free in the index
    log("node.health", id="n1", status="up", procs=[{"job": key, "attempt": 1, "gpus": [0]}])
    assert log.state.held_gpus("n1") == {0: f"{key} (attempt 1, ending)"}
    with pytest.raises(Conflict, match="held by"):
        log("job.place", job=key, node="n1", gpus=[0], term=1)
    log("job.place", job=key, node="n1", gpus=[1], term=1)     # the other GPU is free
    assert log.state.held_gpus("n1") == {0: f"{key} (attempt 1, ending)", 1: key}
    log("node.health", id="n1", status="up", procs=[{"job": key, "attempt": 2, "gpus": [1]}])
    assert log.state.held_gpus("n1") == {1: key}               # its own run fences nothing
    with pytest.raises(InvalidSpec):
        log("node.health", id="n1", status="up", procs=[{"job": key, "gpus": [0]}])


def test_a_spec_stored_before_restart_policies_gets_the_default(log):
    key = log.job()                                            # no "restart" in the spec
    log.running(key)
    assert log("job.update", job=key, state="lost", attempt=1)["state"] == "queued"


@pytest.mark.parametrize("level, listed", [(3, "off"), (2, "up")])
def test_a_beat_committed_after_the_boxs_off_leaves_it_off_until_it_announces_itself(level, listed):
    log = Log()
    log("cluster.protocol", level=level)
    log.node("n1")
    log("node.health", ts=2.0, id="n1", status="off")             # floydd stop: said first
    log("node.health", ts=1.9, id="n1", status="up", procs=[])    # a beat sent just before it, committed after
    assert log.state.nodes["n1"]["status"] == listed              # (before level 3 every box lists it up)
    log.node("n1")                                                 # started again: it announces itself
    log("node.health", ts=9.0, id="n1", status="up", procs=[])
    assert log.state.nodes["n1"]["status"] == "up"
