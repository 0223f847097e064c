"""Through the whole pipeline: why a job waits is served from the leader's memory to every node
and never enters the log; a box admits jobs while it has the cores they ask."""

from __future__ import annotations

import pytest

from floydd.errors import UserError
from tests.harness.pipeline import Lone, answered


async def test_a_follower_lists_the_leaders_reasons_and_none_is_committed(boxes):
    a, b, c = await boxes.start(3)                               # 2 GPUs each
    follower = next(x for x in (a, b, c) if not x.service.is_leader)
    leader = next(x for x in (a, b, c) if x.service.is_leader)
    committed: list[dict] = []
    follower.service.on_apply(lambda event: event.command and committed.append(event.command))
    keys = [(await follower.run("train", gpus=1))["id"] for _ in range(8)]
    await boxes.wait_for(lambda: sum(len(x.runtime.held) for x in (a, b, c)) == 6, what="six jobs running")
    head, behind = keys[6:]
    await boxes.wait_for(lambda: behind in leader.jobs.scheduler.waiting, what="the leader's reasons")
    listed = {j["id"]: j for j in answered(await follower.jobs.list())}
    assert listed[head]["waiting_for"].startswith("waiting for 1 GPU: ")
    assert listed[behind]["waiting_for"] == f"queued behind {head}, which waits for GPUs"
    assert answered(await follower.jobs.get(behind))["waiting_for"] == listed[behind]["waiting_for"]
    assert answered(await follower.jobs.get(behind, stale=True))["waiting_for"] == ""    # a stale read asks no one
    assert all("waiting_for" not in cmd for cmd in committed)

    running = next(x for x in (a, b, c) if x.runtime.held)
    running.runtime.finish(next(iter(running.runtime.held)))
    await boxes.wait_for(lambda: follower.job(head).state != "queued", what="the head placed")
    await boxes.wait_for(lambda: leader.jobs.scheduler.waiting.get(behind, "").startswith("waiting for"),
                         what="the next job at the head")
    assert answered(await follower.jobs.get(behind))["waiting_for"].startswith("waiting for 1 GPU")
    assert all("waiting_for" not in cmd for cmd in committed)


@pytest.fixture
async def two_cores(tmp_path):
    c = Lone(tmp_path, cpus=2, memory=4 << 30)
    try:
        yield c
    finally:
        await c.close()


async def test_a_two_core_box_runs_two_one_core_jobs_at_a_time(two_cores):
    box = await two_cores.start()
    keys = [(await box.run("train"))["id"] for _ in range(3)]           # the config's job_cpus: 1 each
    assert box.job(keys[0]).spec.resources.cpus == 1.0
    await two_cores.wait_for(lambda: len(box.runtime.held) == 2, what="two jobs running")
    await two_cores.wait_for(lambda: keys[2] in box.jobs.scheduler.waiting, what="the third to wait")
    assert answered(await box.jobs.get(keys[2]))["waiting_for"] == "waiting for 1 CPU: box has 0 CPUs free"
    small = (await box.run("train", cpus=0.5, memory="1G"))["id"]
    await two_cores.wait_for(lambda: small in box.jobs.scheduler.waiting, what="the small one to wait")
    assert box.jobs.scheduler.waiting[small] == f"queued behind {keys[2]}, which waits for CPUs or memory"
    box.runtime.finish(("mnist", 1))
    await two_cores.wait_for(lambda: box.job(keys[2]).state != "queued", what="the third placed")
    await two_cores.wait_for(lambda: box.jobs.scheduler.waiting.get(small, "").startswith("waiting for 0.5 CPUs"),
                             what="the half-core one at the head")
    box.runtime.finish(("mnist", 2))
    await two_cores.wait_for(lambda: box.job(small).state != "queued", what="the half-core one placed")
    assert box.service.state.active_index.set_aside(box.service.node_id) == (1500, 1 << 30)     # mnist/3 and the half core
    with pytest.raises(UserError, match="no node has 4 CPUs") as err:
        await box.run("train", cpus=4)
    assert "--cpu 4" in err.value.message and err.value.hint
    with pytest.raises(UserError, match="no node has 8 GiB"):
        await box.run("train", memory="8G")
