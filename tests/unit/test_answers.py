"""A job answer decodes into :class:`floydd.model.JobView` leniently (:mod:`floydd.answers`): a daemon
of another release may leave fields out or send new ones, and a broken answer is an error, not a
traceback."""

from __future__ import annotations

import pytest

from floydd.answers import decode_job, decode_jobs
from floydd.errors import InternalError
from floydd.model import JobView, Mount

FULL = {"id": "mnist/3", "project": "mnist", "number": 3, "state": "running", "reason": "", "command": "python t.py",
        "params": {"lr": "0.1"}, "code_tree": "ab" * 32, "data": [{"ref": "digits:1", "tree": "cd" * 32,
                                                                     "mount": "/input"}],
        "resources": {"gpus": 2, "nodes": 2}, "gpus": [0, 1], "env": "default", "message": "first",
        "created": 10.0, "started": 11.0, "ended": None, "exit_code": None, "output_version": None,
        "node": "box-a", "user": "ada", "waiting_for": "",
        "metrics": {"loss": {"last": 0.5, "last_step": 3, "min": 0.5, "max": 1.0, "count": 4}},
        "parts": [{"rank": 0, "node": "box-a", "node_id": "n1", "gpus": [0, 1], "state": "running",
                   "exit_code": None, "reason": ""}],
        "restart": {"policy": "on-lost", "max_attempts": 3}, "reruns": 1}


def test_a_full_answer_decodes_into_typed_values() -> None:
    job = decode_job(FULL)
    assert isinstance(job, JobView) and job.id == "mnist/3" and job.gpus == (0, 1)
    assert job.data == (Mount(ref="digits:1", tree="cd" * 32, mount="/input"),)
    assert job.resources.gpus == 2 and job.resources.nodes == 2 and job.resources.cpus == 0
    assert job.metrics["loss"].count == 4 and job.metrics["loss"].last_ts is None
    assert job.parts[0].node_id == "n1" and job.restart.max_attempts == 3 and job.events == ()


def test_an_older_daemons_answer_gets_empty_values_and_a_newer_ones_extras_are_ignored() -> None:
    old = {"id": "mnist/3", "project": "mnist", "number": 3, "state": "failed", "exit_code": 2,
           "resources": {}, "metrics": {"loss": {"last": 1.5}}, "parts": [{"rank": 1, "node": "b"}],
           "a_field_of_tomorrow": {"x": 1}}
    job = decode_job(old)
    assert (job.user, job.node, job.command, job.params, job.gpus, job.started, job.created) == \
        ("", "", "", {}, (), None, 0.0)
    assert job.exit_code == 2 and job.resources.gpus == 0 and job.resources.nodes == 1
    assert job.metrics["loss"].last == 1.5 and job.metrics["loss"].count == 0
    assert job.parts[0].rank == 1 and job.parts[0].gpus == () and job.parts[0].exit_code is None
    assert not hasattr(job, "a_field_of_tomorrow")


@pytest.mark.parametrize("answer, says", [
    ({**FULL, "state": "exploded"}, "state"),
    ({**FULL, "gpus": "0,1"}, "gpus"),
    ({**FULL, "metrics": {"loss": {"last": "low"}}}, "metrics"),
    ({k: v for k, v in FULL.items() if k != "state"}, "without state"),
    (["mnist/3"], "not list"),
    (None, "not NoneType"),
])
def test_an_answer_that_is_no_job_is_a_clear_error(answer, says) -> None:
    with pytest.raises(InternalError, match="cannot read") as raised:
        decode_job(answer)
    assert says in raised.value.message and "releases" in raised.value.hint


def test_a_listing_decodes_each_job_and_refuses_what_is_no_list() -> None:
    assert [j.id for j in decode_jobs([FULL, {**FULL, "id": "mnist/4", "number": 4}])] == ["mnist/3", "mnist/4"]
    with pytest.raises(InternalError, match="JSON array"):
        decode_jobs({"jobs": []})
