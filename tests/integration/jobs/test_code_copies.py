"""A job's code is kept like a dataset version (issue 21), through the whole pipeline (real raft,
records, stores, mTLS between the boxes; fake runs): a submit is answered once two boxes hold
its code; when the box it was submitted from is destroyed, another box makes a new copy; a
rerun on a third box, after the box that ran it is gone too, starts with its code; deleting
the job's last job forgets the tree, and gc gives its space back."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from floydd.cluster.replication.storecare import named_trees
from floydd.model import Restart
from floydd.store import ObjectId
from tests.conftest import wait_until_async
from tests.harness.pipeline import Boxes, answered


@pytest.fixture
async def boxes(tmp_path):
    c = Boxes(tmp_path, replica_grace=1.5)      # a silent holder's copy stops counting after 1.5 s
    try:
        yield c
    finally:
        await c.close()


def _counted(box, tree: str, dead: set[str]) -> set[str]:
    return set(box.service.state.code.get(tree, {}).get("holders", ())) - dead


async def test_the_code_outlives_the_box_it_came_from_and_the_box_that_ran_it(boxes):
    a, b, c, d = await boxes.start(4)
    filler = await b.run("python filler.py", gpus=1)        # best fit puts the next 1-GPU job beside it
    await boxes.wait_for(lambda: b.job(filler["id"]).state == "running", what="the filler running")
    runner = next(x for x in (a, b, c, d) if x.runtime.held)
    origin = next(x for x in (a, b, c, d) if x is not runner)
    job = await origin.run("python train.py", gpus=1, restart="on-lost")
    tree = job["code_tree"]
    held = origin.service.state.code[tree]["holders"]       # answered once two boxes hold it
    assert len(held) == 2 and origin.service.node_id in held, held
    assert job["id"] in origin.service.state.code[tree]["jobs"]
    await boxes.wait_for(lambda: origin.job(job["id"]).state == "running", what="the job running")
    assert origin.job(job["id"]).node == runner.service.node_id

    dead = {origin.service.node_id}                          # destroyed: killed and its state wiped
    await origin.detach()
    await boxes.kill(boxes.node(origin))
    shutil.rmtree(origin.store.root / "objects", ignore_errors=True)
    others = [x for x in (a, b, c, d) if x is not origin]
    await boxes.wait_for(lambda: len(_counted(others[0], tree, dead)) >= 2, timeout=20,
                         what="a new copy of the code in place of the destroyed one")
    await boxes.wait_for(lambda: origin.service.node_id not in boxes.leader(boxes.live()).driver.status().voters,
                         timeout=20, what="the destroyed box out of the voters")

    await runner.detach()                                    # the box that ran it goes too
    await boxes.kill(boxes.node(runner))
    left = [x for x in others if x is not runner]
    rerun = await wait_until_async(lambda: next((x for x in left if any(s["key"] == job["id"]
                                                                        for s in x.runtime.started)), None),
                                   timeout=30, what="the rerun started on a third box",
                                   details=lambda: repr(left[0].job(job["id"]).history))
    assert await _has(rerun, tree), "the rerun's box holds the whole code tree"
    assert (rerun.job(job["id"]).attempts, rerun.job(job["id"]).reruns) == (2, 1)


async def test_the_code_goes_with_its_last_job(boxes):
    a, b = await boxes.start(2)
    first = await a.run("true")
    tree = first["code_tree"]
    assert len(a.service.state.code[tree]["holders"]) == 2
    await boxes.ended(a, first["id"])
    again = answered(await a.jobs.restart(first["id"], Restart(), user="alice"))    # a rerun shares the tree
    assert again["code_tree"] == tree
    await boxes.ended(a, again["id"])
    assert a.service.state.code[tree]["jobs"] == sorted([first["id"], again["id"]])
    await a.jobs.delete(first["id"], user="alice")
    await boxes.wait_for(lambda: b.service.state.code.get(tree, {}).get("jobs") == [again["id"]],
                         what="the first job out of the tree's jobs")
    assert ObjectId.from_hex(tree) in named_trees(b.service.state, b.service.node_id, [])
    await a.jobs.delete(again["id"], user="alice")
    await boxes.wait_for(lambda: tree not in b.service.state.code, what="the tree forgotten with its last job")
    assert ObjectId.from_hex(tree) not in named_trees(b.service.state, b.service.node_id, [])



async def _has(box, tree: str) -> bool:
    return await asyncio.to_thread(box.jobs.local.has_tree, ObjectId.from_hex(tree))
