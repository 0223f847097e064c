"""Archived jobs are listed, paged, read and deleted like the others (the job service over the
hot state and the archive), and a job that saved nothing says so."""

from __future__ import annotations

import dataclasses

import pytest

from floydd.cluster.archiver import Archiver
from floydd.errors import NotFound
from floydd.model import JobOrder
from tests.harness.pipeline import answered

pytestmark = pytest.mark.timeout(60)


async def _archive(box, keep: int) -> int:
    service = box.service
    archiver = Archiver(node_id=service.node_id, config=service.config, state=service.state, driver=service.driver)
    archiver.config = dataclasses.replace(box.service.config, archive_keep=keep, archive_after=1e9)
    return await archiver.archive_once()


async def test_archived_jobs_are_listed_paged_read_and_deleted(lone):
    box = await lone.start()
    keys = []
    for i in range(12):
        keys.append((await box.run("save" if i == 0 else "true", message=f"run {i + 1}"))["id"])
        await lone.ended(box, keys[-1])
    assert await _archive(box, keep=4) == 8
    assert sorted(box.service.state.jobs, key=lambda k: int(k.split("/")[1])) == keys[8:]
    newest = [f"mnist/{n}" for n in range(12, 0, -1)]

    assert [j["id"] for j in answered(await box.jobs.list())] == newest
    assert [j["id"] for j in answered(await box.jobs.list("mnist", limit=5))] == newest[:5]
    page = answered(await box.jobs.list(limit=5, offset=5))         # across the hot state and the archive
    assert [j["id"] for j in page] == newest[5:10]
    assert all(j["state"] == "success" and j["node"] == "box" for j in page)
    since = answered(await box.jobs.get("mnist/6"))["created"]
    assert [j["id"] for j in answered(await box.jobs.list(since=since))] == newest[:7]
    assert [j["id"] for j in answered(await box.jobs.list(state="failed"))] == []
    assert await box.jobs.list(project="other") == []

    old = answered(await box.jobs.get("mnist/1"))                    # floyd info of an archived job
    assert (old["state"], old["message"], old["attempt"]) == ("success", "run 1", 1)
    events = [e["message"] for e in await box.jobs.events("mnist/1")]  # the box's own events stay
    assert events, "the events of the box that ran it"
    assert str(await box.jobs.tree_for("mnist/1", "output"))       # its /output is still a version

    await box.jobs.delete("mnist/2")
    assert "mnist/2" not in [j["id"] for j in answered(await box.jobs.list())]
    await lone.wait_for(lambda: _no_record(box, 2), what="the box to forget the deleted job's record")
    with pytest.raises(NotFound):
        await box.jobs.get("mnist/2")
    assert (await box.run("true"))["id"] == "mnist/13"


async def test_a_sort_and_a_text_filter_span_the_hot_jobs_and_the_archive(lone):
    box = await lone.start()
    for i in range(8):
        job = await box.run("true" if i % 3 else "false", message=f"run {i + 1}", project="mnist" if i % 2 else "bert")
        await lone.ended(box, job["id"])
    assert await _archive(box, keep=3) == 5                       # the five oldest are archived
    every = answered(await box.jobs.list())
    archived = {j["id"] for j in every if j["archived"]}
    assert len(archived) == 5

    oldest = sorted(every, key=lambda j: (j["created"], j["number"]))
    by_state = sorted(every, key=lambda j: j["state"] != "failed")          # failed before success, ties newest first
    by_project = sorted(every, key=lambda j: j["project"])
    for order, expected in (("created", oldest), ("state", by_state), ("project", by_project),
                            ("-project", sorted(every, key=lambda j: j["project"], reverse=True))):
        got = [j["id"] for j in answered(await box.jobs.list(order=JobOrder.parse(order)))]
        assert got == [j["id"] for j in expected], order
        for offset in (0, 2, 4, 6):                              # pages of a sort are slices of the whole
            page = answered(await box.jobs.list(order=JobOrder.parse(order), limit=2, offset=offset))
            assert [j["id"] for j in page] == got[offset:offset + 2], (order, offset)
    bert = [j["id"] for j in every if j["project"] == "bert"]
    assert {j["id"] for j in every if j["id"] in archived and j["project"] == "bert"}, "bert jobs in the archive"
    assert [j["id"] for j in answered(await box.jobs.list(needle="bert/"))] == bert
    assert [j["id"] for j in answered(await box.jobs.list(needle="bert/", limit=2, offset=1))] == bert[1:3]
    failed = [j["id"] for j in every if j["state"] == "failed"]
    assert [j["id"] for j in answered(await box.jobs.list(needle="fail", order=JobOrder.parse("created")))] == \
        failed[::-1]


def _no_record(box, number: int) -> bool:
    try:
        box.records.get_job("mnist", number)
    except NotFound:
        return True
    return False


async def test_a_job_whose_output_was_empty_makes_no_version_and_says_it_saved_nothing(lone):
    box = await lone.start()
    job = await box.run("empty")
    done = await lone.ended(box, job["id"])
    await lone.wait_for(lambda: box.job(job["id"]).output_version == "", what="the empty /output reported")
    assert box.service.state.datasets == {}                 # no version, no catalog entry through raft
    with pytest.raises(NotFound) as err:
        await box.jobs.tree_for(job["id"], "output")        # floyd output JOB
    assert err.value.code == "output_empty" and "saved nothing" in err.value.message
    assert done["state"] == "success"
