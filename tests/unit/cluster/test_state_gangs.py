"""Gang jobs in the replicated state: placed whole, one report per part, the job follows its parts."""

from __future__ import annotations

import pytest

from floydd.errors import Conflict, InvalidSpec
from tests.unit.cluster.test_state import Log, node, submit, update

TERM = 3


def gang_submit(nodes=2, gpus=1, key="g1"):
    cmd = submit(key=key, gpus=gpus)
    cmd["spec"]["resources"]["nodes"] = nodes
    return cmd


def gang_place(parts, job="mnist/1", term=TERM, ts=3.0):
    parts = [{"node": n, "gpus": list(g)} for n, g in parts]
    return {"op": "job.place", "job": job, "node": parts[0]["node"], "gpus": parts[0]["gpus"], "parts": parts,
            "term": term, "ts": ts}


def part(rank, node, ts=5.0, **kw):
    return update(rank=rank, node=node, attempt=1, ts=ts, **kw)


@pytest.fixture
def log():
    log = Log()
    for nid in ("n1", "n2", "n3"):
        log(node(nid))
    log(gang_submit())
    return log


def test_a_gang_is_placed_whole_and_holds_gpus_on_every_node(log):
    job = log(gang_place([("n2", [1]), ("n1", [0])]))
    assert (job["state"], job["node"], job["gpus"], job["endpoint"]) == ("starting", "n2", [1], None)
    assert [(p["rank"], p["node"], p["gpus"], p["state"]) for p in job["parts"]] == \
        [(0, "n2", [1], "starting"), (1, "n1", [0], "starting")]
    assert log.state.held_gpus("n1") == {0: "mnist/1"} and log.state.held_gpus("n2") == {1: "mnist/1"}
    assert "placed on box-n2 (GPU 1), box-n1 (GPU 0)" in job["history"][-1][1]


@pytest.mark.parametrize("parts, error", [
    ([("n1", [0])], "spans 2 nodes"),
    ([("n1", [0]), ("n1", [1])], "names a node twice"),
    ([("n1", [0]), ("n2", [0, 1])], "wants 1 GPUs"),
])
def test_a_placement_that_is_not_the_gang_is_refused(log, parts, error):
    with pytest.raises(InvalidSpec, match=error):
        log(gang_place(parts))
    assert log.state.jobs["mnist/1"].state == "queued"


def test_a_gang_part_on_a_busy_gpu_refuses_the_whole_placement(log):
    log(submit(key="other"))
    log({"op": "job.place", "job": "mnist/2", "node": "n2", "gpus": [0], "term": TERM, "ts": 3.0})
    with pytest.raises(Conflict) as exc:
        log(gang_place([("n1", [0]), ("n2", [0])]))
    assert exc.value.code == "gpu_busy"
    assert log.state.held_gpus("n1") == {}


def test_rank_0_commits_the_rendezvous_and_the_job_runs_once_every_part_runs(log):
    log(gang_place([("n1", [0]), ("n2", [0])]))
    with pytest.raises(InvalidSpec, match="only rank 0"):
        log(part(1, "n2", endpoint="10.0.0.2:1234"))
    assert log(part(0, "n1", endpoint="10.0.0.1:29500"))["endpoint"] == "10.0.0.1:29500"
    assert log(part(0, "n1", state="running"))["state"] == "starting"
    job = log(part(1, "n2", state="running"))
    assert (job["state"], job["started"]) == ("running", 5.0)
    job = log(part(1, "n2", state="success", exit_code=0, summary={"metrics": {"loss": 9}}))
    assert job["state"] == "running" and job["summary"] == {}          # only rank 0 speaks for the job
    job = log(part(0, "n1", state="success", exit_code=0, output_version="mnist/1/output:1",
                   summary={"metrics": {"loss": 1}}, ts=9.0))
    assert (job["state"], job["ended"], job["exit_code"], job["output_version"]) == \
        ("success", 9.0, 0, "mnist/1/output:1")
    assert job["summary"]["metrics"] == {"loss": 1}
    assert log.state.held_gpus("n1") == {} and log.state.held_gpus("n2") == {}


def test_the_first_part_to_fail_fails_the_job_and_later_reports_only_fill_in_parts(log):
    log(gang_place([("n1", [0]), ("n2", [0])]))
    log(part(0, "n1", state="running"))
    log(part(1, "n2", state="running"))
    job = log(part(1, "n2", state="failed", exit_code=3, reason="exit code 3"))
    assert (job["state"], job["reason"]) == ("failed", "rank 1 on box-n2 failed: exit code 3")
    job = log(part(0, "n1", state="stopped", reason="another part ended"))
    assert job["state"] == "failed" and job["parts"][0]["state"] == "stopped"


def test_part_reports_are_fenced_by_rank_node_and_attempt(log):
    log(gang_place([("n1", [0]), ("n2", [0])]))
    for cmd, code in ((part(1, "n1", state="running"), "wrong_node"), (part(5, "n1"), "no_such_part"),
                      (update(rank=0, node="n1", attempt=7, state="running"), "stale_attempt")):
        with pytest.raises(Conflict) as exc:
            log(cmd)
        assert exc.value.code == code
    with pytest.raises(Conflict):
        log(part(0, "n1", state="success"))                          # starting -> success skips running


def test_a_requeued_gang_forgets_its_parts_and_is_placed_again(log):
    log(gang_place([("n1", [0]), ("n2", [0])]))
    log(part(0, "n1", endpoint="10.0.0.1:1"))
    job = log(update(state="queued", attempt=1, reason="node n2 went silent before the job started"))
    assert (job["parts"], job["endpoint"], log.state.held_gpus("n1")) == ([], None, {})
    job = log(gang_place([("n3", [0]), ("n1", [1])], ts=6.0))
    assert job["attempts"] == 2 and [p["node"] for p in job["parts"]] == ["n3", "n1"]


def test_a_one_node_job_has_no_parts_and_takes_no_rank(log):
    log(submit(key="single"))
    job = log({"op": "job.place", "job": "mnist/2", "node": "n3", "gpus": [0], "term": TERM, "ts": 3.0})
    assert job["parts"] == [] and job["endpoint"] is None
    with pytest.raises(Conflict, match="no part of rank 0"):
        log(update(job="mnist/2", rank=0, state="running"))
    with pytest.raises(InvalidSpec, match="endpoint"):
        log(update(job="mnist/2", endpoint="x:1"))
