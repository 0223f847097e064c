"""Outages and restart policies through the whole pipeline (real raft, records, stores, catalogs;
fake runs): a cut-off box's job is ``unknown`` and carries on when the box is back; a box
crashed for good has its job rerun elsewhere from its last checkpoint (the default policy)
while a ``--restart never`` job ends lost; ``--restart on-failure`` reruns a failure."""

from __future__ import annotations

from floydd.model import FINAL_STATES
from tests.conftest import wait_until_async


async def test_a_failure_reruns_under_on_failure_until_its_attempts_are_spent(lone):
    box = await lone.start()
    job = await box.run("false", restart="on-failure", max_attempts=2)
    done = await lone.ended(box, job["id"])
    assert (done["state"], done["attempts"], done["reruns"]) == ("failed", 2, 1)
    history = [e["message"] for e in await box.jobs.events(job["id"])]
    assert any("run 2 of at most 2 follows (--restart on-failure)" in line for line in history), history
    assert [s["key"] for s in box.runtime.started] == [job["id"]] * 2
    once = await box.run("false")                                  # the default (on-lost) does not rerun it
    assert (await lone.ended(box, once["id"]))["attempts"] == 1


async def test_a_box_cut_off_for_a_while_keeps_its_job_which_is_unknown_meanwhile(boxes):
    a, b, c = await boxes.start(3)
    job = await a.run("python train.py", lost_after=60)
    key = job["id"]
    await boxes.wait_for(lambda: a.job(key).state == "running", what="the job running")
    runner = next(x for x in (a, b, c) if x.runtime.held)
    others = [x for x in (a, b, c) if x is not runner]
    boxes.isolate(boxes.node(runner))
    await boxes.wait_for(lambda: others[0].job(key).state == "unknown", timeout=15, what="the job unknown")
    assert others[0].service.state.nodes[runner.service.node_id]["status"] == "suspect"
    boxes.heal()
    await wait_until_async(lambda: others[0].job(key).state == "running", timeout=15, what="the job running again",
                           details=lambda: repr(others[0].job(key).history) + repr(others[0].service.state.nodes))
    runner.runtime.finish(next(iter(runner.runtime.held)), "success")
    done = await boxes.ended(others[0], key)
    assert (done["state"], done["attempts"], done["reruns"]) == ("success", 1, 0)
    assert len(runner.runtime.started) == 1 and not any(x.runtime.started for x in others)


async def test_a_box_crashed_for_good_has_its_job_rerun_from_its_checkpoint_and_a_never_job_lost(boxes):
    a, b, c = await boxes.start(3)
    ckpt = await c.run("ckpt", gpus=1)              # from c: the code stays there (it is not replicated)
    never = await c.run("ckpt", gpus=1, restart="never")
    await boxes.wait_for(lambda: all(a.job(k).state == "running" for k in (ckpt["id"], never["id"])),
                         what="both running")
    where = {a.job(k).node for k in (ckpt["id"], never["id"])}
    assert len(where) == 1 and c.service.node_id not in where, "best fit puts both on one box's two GPUs"
    await boxes.wait_for(lambda: a.job(ckpt["id"]).output_version, what="a checkpoint published")
    ref = a.job(ckpt["id"]).output_version
    name, _, number = ref.rpartition(":")
    await boxes.wait_for(lambda: len(a.service.state.datasets[name]["versions"][number]["holders"]) == 2,
                         what="the checkpoint on two boxes")
    tree = a.service.state.datasets[name]["versions"][number]["tree"]
    doomed = [x for x in (a, b, c) if x.service.node_id in where]
    for box in doomed:
        await box.detach()
        await boxes.kill(boxes.node(box))
    left = [x for x in (a, b, c) if x not in doomed]
    rerun = await wait_until_async(lambda: next((x for x in left if x.runtime.started
                                               and x.runtime.started[-1]["key"] == ckpt["id"]), None),
                                 timeout=20, what="the rerun started on a survivor")
    assert rerun.runtime.started[-1]["resume"] == tree, "the rerun starts from the checkpoint"
    assert (rerun.runtime.jobs_dir / "mnist" / ckpt["id"].split("/")[1]).exists()
    job = rerun.job(ckpt["id"])
    assert (job.attempts, job.reruns) == (2, 1)
    await boxes.wait_for(lambda: rerun.job(never["id"]).state in FINAL_STATES, timeout=20,
                         what="the never job settled")
    assert rerun.job(never["id"]).state == "lost" and rerun.job(never["id"]).attempts == 1

