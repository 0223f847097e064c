"""The one road every job takes, in process: submit, commit, place, start, report, end — on a
box alone (a one-voter cluster) and on three nodes. Runs are faked (no processes); everything
else is real: raft logs, records, stores, catalogs, the node-to-node API over mTLS."""

from __future__ import annotations

import asyncio
import time

import pytest

from floydd.errors import Conflict, NotFound, UserError
from floydd.model import FINAL_STATES, Restart
from tests.harness.pipeline import answered

pytestmark = pytest.mark.timeout(60)


async def test_a_job_on_a_box_alone_is_committed_placed_run_and_reported(lone):
    box = await lone.start()
    t0 = time.monotonic()
    job = await box.run("true", params={"lr": "0.1"})
    assert (job["id"], job["state"], job["params"]) == ("mnist/1", "queued", {"lr": "0.1"})
    done = await lone.ended(box, "mnist/1")
    assert time.monotonic() - t0 < 1.0, "submit to success on a box alone"
    assert (done["state"], done["exit_code"], done["node"], done["attempt"]) == ("success", 0, "box", 1)
    record = box.records.get_job("mnist", 1)
    assert (record["state"], record["attempt"], record["code_tree"]) == ("success", 1, job["code_tree"])
    assert box.runtime.started[0]["command"] == "true"
    assert [j["id"] for j in answered(await box.jobs.list())] == ["mnist/1"]
    assert (await box.jobs.read_log("mnist/1", 0)) == (b"ran true\n", True)
    events = [e["message"] for e in await box.jobs.events("mnist/1")]
    assert events[0].startswith("submitted on box") and any("placed on box" in e for e in events)


async def test_numbers_follow_each_other_and_a_failure_is_reported_with_its_exit_code(lone):
    box = await lone.start()
    keys = [(await box.run(cmd))["id"] for cmd in ("true", "false", "true")]
    assert keys == ["mnist/1", "mnist/2", "mnist/3"]
    states = [(await lone.ended(box, k))["state"] for k in keys]
    assert states == ["success", "failed", "success"]
    assert answered(await box.jobs.get("mnist/2"))["exit_code"] == 1


async def test_gpu_jobs_wait_for_gpus_say_why_and_a_stop_ends_a_waiting_or_running_job(lone):
    box = await lone.start()                                    # two GPUs
    first = await box.run("train", gpus=2)
    await lone.wait_for(lambda: box.job(first["id"]).state == "running", what="the first job running")
    second = await box.run("train", gpus=1)
    await lone.wait_for(lambda: "waiting for 1 GPU" in box.jobs.scheduler.waiting.get(second["id"], ""),
                        what="a reason")                # kept in the leader's memory, not committed
    assert "held by mnist/1" in answered(await box.jobs.get(second["id"]))["waiting_for"]
    stopped = answered(await box.jobs.stop(second["id"]))
    assert stopped["state"] == "stopped" and box.runtime.started[-1]["key"] == first["id"]
    third = await box.run("true", gpus=1)
    ended = answered(await box.jobs.stop(first["id"]))
    assert (ended["state"], ended["reason"]) == ("stopped", "stopped by user")
    assert (await lone.ended(box, third["id"]))["state"] == "success"
    assert box.runtime.started[-1]["gpus"] in ([0], [1])
    with pytest.raises(Conflict):
        await box.jobs.stop(first["id"])


async def test_a_job_that_can_never_run_is_refused_at_submission(lone):
    box = await lone.start()
    with pytest.raises(UserError, match="no node has 3 GPUs"):
        await box.run("train", gpus=3)
    with pytest.raises(UserError, match="needs 2 nodes") as err:
        await box.run("python train.py", nodes=2)
    assert "floydd join" in err.value.hint
    assert box.service.state.jobs == {}


async def test_delete_forgets_the_job_everywhere_and_restart_runs_it_again(lone):
    box = await lone.start()
    job = await box.run("true", params={"lr": "0.1"})
    await lone.ended(box, job["id"])
    again = answered(await box.jobs.restart(job["id"], Restart(params={"lr": "0.2"})))
    assert (again["id"], again["params"], again["message"]) == ("mnist/2", {"lr": "0.2"}, "restart of mnist/1")
    assert again["code_tree"] == job["code_tree"]
    await lone.ended(box, again["id"])
    await box.jobs.delete(job["id"])
    with pytest.raises(NotFound):
        await box.jobs.get(job["id"])
    await lone.wait_for(lambda: not _has_record(box, 1), what="the local record forgotten")
    assert [j["id"] for j in answered(await box.jobs.list())] == ["mnist/2"]


async def test_history_from_before_the_control_plane_is_listed_and_numbered_above(lone, tmp_path):
    box = await lone.start()
    box.records.insert_job("mnist", 7, {"command": "old", "attempt": 0, "created": 1.0})
    box.records.set_state("mnist", 7, "starting", "")
    box.records.set_state("mnist", 7, "running", "")
    box.records.set_state("mnist", 7, "success", "")
    box = await lone.restart(box)                                # numbers are reserved at start
    await lone.wait_for(lambda: box.service.state.counters.get("mnist") == 7, what="the numbers reserved")
    job = await box.run("true")
    assert job["id"] == "mnist/8"
    listed = [(j["id"], j["state"]) for j in answered(await box.jobs.list())]
    assert listed == [("mnist/8", "queued"), ("mnist/7", "success")] or listed[1] == ("mnist/7", "success")
    assert answered(await box.jobs.get("mnist/7"))["command"] == "old"
    await lone.ended(box, job["id"])


async def test_a_restart_of_the_box_keeps_a_running_job_and_reports_its_end(lone):
    box = await lone.start()
    job = await box.run("train")
    await lone.wait_for(lambda: box.job(job["id"]).state == "running", what="running")
    box = await lone.restart(box)                                 # the run survives (an agent would)
    assert answered(await box.jobs.get(job["id"]))["state"] == "running"
    box.runtime.finish(("mnist", 1), "success")
    assert (await lone.ended(box, job["id"]))["state"] == "success"
    assert len(box.runtime.started) == 0, "not started twice"


async def test_three_nodes_place_run_and_list_a_job_from_any_node(boxes):
    a, b, c = await boxes.start(3)
    job = await c.run("true", gpus=2)     # how fast: bench/cluster_job_start.py (a timed assert here failed under load)
    done = await boxes.ended(c, job["id"])
    ran = next(x for x in (a, b, c) if x.runtime.started)
    assert done["node"] == ran.name and done["state"] == "success" and done["gpus"] == [0, 1]
    for x in (a, b, c):
        assert [(j["id"], j["state"]) for j in answered(await x.jobs.list(stale=True))] == [("mnist/1", "success")]
    assert await c.jobs.read_log(job["id"], 0) == (b"ran true\n", True)          # from the box that ran it
    assert ran.records.get_job("mnist", 1)["code_tree"] == job["code_tree"]       # fetched from c


async def test_an_output_is_published_fetched_from_any_node_and_deleted_with_its_job(boxes, tmp_path):
    a, b, c = await boxes.start(3)
    job = await c.run("save", gpus=2)
    done = await boxes.ended(c, job["id"])
    assert done["output_version"] == "mnist/1/output:1"
    listed = {v["ref"]: v for v in await a.datasets.list()}
    assert "mnist/1/output:1" in listed
    tree = await a.jobs.tree_for(job["id"], "output")                  # fetched here if a did not run it
    await asyncio.to_thread(a.store.restore, tree, tmp_path / "out")
    assert (tmp_path / "out" / "model.txt").read_text() == "trained mnist/1\n"
    await b.jobs.delete(job["id"])
    await boxes.wait_for(lambda: all("mnist/1/output" not in x.service.state.datasets
                                     or not x.service.state.datasets["mnist/1/output"]["versions"]
                                     for x in (a, b, c)), what="the output gone from the catalog")
    assert "mnist/1/output:1" not in {v["ref"] for v in await c.datasets.list()}


async def test_a_gang_is_placed_whole_with_a_committed_rendezvous(boxes):
    a, b, c = await boxes.start(3)
    job = await a.run("python train.py", nodes=2)
    await boxes.wait_for(lambda: sum(len(x.runtime.started) for x in (a, b, c)) == 2, what="both parts started")
    parts = [s for x in (a, b, c) for s in x.runtime.started]
    endpoint = a.job(job["id"]).endpoint
    assert endpoint and all(f"--master-addr={endpoint.rsplit(':', 1)[0]}" in p["command"] for p in parts)
    assert sorted(p["command"].split("--node-rank=")[1][0] for p in parts) == ["0", "1"]
    for x in (a, b, c):
        for key in list(x.runtime.held):
            x.runtime.finish(key, "success")
    assert (await boxes.ended(a, job["id"]))["state"] == "success"


async def test_a_failed_part_ends_the_gang_and_the_other_part_is_stopped(boxes):
    a, b, c = await boxes.start(3)
    job = await b.run("python train.py", nodes=2)
    await boxes.wait_for(lambda: sum(len(x.runtime.held) for x in (a, b, c)) == 2, what="both parts running")
    first = next(x for x in (a, b, c) if x.runtime.held)
    first.runtime.finish(next(iter(first.runtime.held)), "failed", exit_code=3)
    done = await boxes.ended(b, job["id"])
    assert done["state"] == "failed" and "failed" in done["reason"]
    await boxes.wait_for(lambda: not any(x.runtime.held for x in (a, b, c)), what="the other part stopped")
    await boxes.wait_for(lambda: all(p.state in FINAL_STATES for p in b.job(job["id"]).parts),
                         what="every part final")


def _has_record(box, number: int) -> bool:
    try:
        box.records.get_job("mnist", number)
        return True
    except NotFound:
        return False
