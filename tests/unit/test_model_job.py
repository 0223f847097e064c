"""The typed job record (floydd.model.Job): read from every stored form the replicated state
makes (any command log, hypothesis), it keeps every stored value, writes them back, and
answers ``part_on`` as the stored form says."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from floydd.cluster.state.machine import ClusterState
from floydd.model import Job, JobPart, JobSpec, Resources, RestartPolicy
from tests.unit.cluster.test_state_index import apply, logs
from tests.unit.cluster.test_state_properties import NODES


def _check(stored: dict) -> Job:
    job = Job.from_dict(stored)
    written = job.to_dict()
    for key, value in stored.items():        # every stored value kept, the same after writing back
        assert written[key] == value, key
    if job.spec is not None:
        assert JobSpec.from_dict(written["spec"]) == job.spec
    assert Job.from_dict(written) == job
    for nid in NODES + ("elsewhere",):
        part = job.part_on(nid)
        if stored.get("parts"):
            want = [p for p in stored["parts"] if p["node"] == nid]
            assert (part.rank, list(part.gpu_ids), part.state) == (want[0]["rank"], want[0]["gpus"],
                                                                   want[0]["state"]) if want else part is None
        elif stored["node"] == nid:
            assert (part.rank, list(part.gpu_ids), part.state) == (None, stored["gpus"], stored["state"])
        else:
            assert part is None
    return job


@settings(max_examples=40)
@given(logs())
def test_every_stored_job_reads_and_writes_back_unchanged(log):
    state = ClusterState()
    code = {"code_tree": "ab" * 16}           # readable specs, but for the odd "cpus": "x"
    log = [{**cmd, "spec": {**cmd["spec"], **code}} if cmd["op"] == "job.submit" else cmd for cmd in log]
    for index, cmd in enumerate(log, 1):
        apply(state, cmd, index)
    for job in state.jobs.values():
        _check(job.to_dict())
    moved = state.apply({"op": "job.archive", "jobs": sorted(state.jobs), "ts": 1.0, "term": 1},
                        index=len(log) + 1, term=1)["archived"]
    for key in moved:                        # the archive's form: no history, when it moved
        archived = _check(state.archive.get(key).to_dict())
        assert archived.archived_at == len(log) + 1 and archived.history == ()


def test_a_real_spec_is_typed_and_an_unreadable_one_is_kept_as_stored():
    spec = JobSpec(command="python train.py", code_tree="ab" * 16, resources=Resources(gpu_count=2),
                   restart=RestartPolicy(policy="on-failure", max_attempts=5, lost_after=90.0))
    stored = {"id": "mnist/3", "project": "mnist", "number": 3, "idem_key": "k", "spec": spec.to_dict(),
              "state": "running", "created": 1.0, "updated": 2.0, "node": "n1", "gpus": [0, 1], "attempts": 1,
              "summary": {"loss": 0.5}, "history": [[1.0, "submitted on n1"]], "archived_at": 7}
    job = _check(stored)
    assert job.spec.restart.max_attempts == 5 and job.spec.resources.gpu_count == 2 and job.gpu_ids == (0, 1)
    assert job.extra == {} and job.archived_at == 7 and job.to_dict()["archived_at"] == 7
    with pytest.raises(TypeError):
        job.summary["loss"] = 1.0             # frozen all the way: the state's values cannot be changed through it
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = "success"
    newer = {**stored, "spec": {**spec.to_dict(), "restart": {"policy": "always-and-forever"}}}
    unreadable = _check(newer)
    assert unreadable.spec is None and unreadable.to_dict()["spec"] == newer["spec"]
    with pytest.raises(TypeError):
        job.stored_spec["command"] = "rm -rf /"    # nor through the spec as stored
    assert job.part_on("n1") == JobPart(rank=None, node="n1", gpu_ids=(0, 1), state="running")
