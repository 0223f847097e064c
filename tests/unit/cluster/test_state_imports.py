"""Imported jobs in the state machine (floydd.cluster.state.imported): numbers first, then finished jobs."""

from __future__ import annotations

import pytest

from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, Forbidden, InvalidSpec
from tests.unit.cluster.test_state import Log, node, submit

KEY = "import:fp1:mnist/3"


def allocate(keys, project="mnist", proposer="n1", ts=5.0):
    return {"op": "project.allocate", "project": project, "keys": list(keys), "ts": ts, "proposer": proposer}


def imported(number, key=KEY, *, state="success", proposer="n1", node_id="n1", ts=6.0, **kw):
    return {"op": "job.import", "idem_key": key, "project": "mnist", "number": number, "node": node_id,
            "spec": {"command": "python train.py", "params": {"lr": "0.1"}, "code_tree": "ab" * 32, "data": []},
            "state": state, "exit_code": 0, "created": 1.0, "started": 2.0, "ended": 3.0,
            "output_version": f"mnist/{number}/output:1", "summary": {"metrics": {"loss": {"last": 0.1}}},
            "history": [[1.0, "submitted on box-x"], [2.0, "placed on box-y"]],
            "imported": {"origin": "fp1", "origin_name": "lab-a", "job": "mnist/3"}, "user": "bob",
            "ts": ts, "proposer": proposer, **kw}


@pytest.fixture
def log():
    log = Log(ClusterState(protocol=2))   # imports came with level 2 (floydd.cluster.state.versions)
    log(node())
    return log


def test_numbers_come_after_the_projects_jobs_and_the_same_key_keeps_its_number(log):
    log(submit("a"))
    numbers = log(allocate([KEY, "import:fp1:mnist/4"]))
    assert numbers == {KEY: 2, "import:fp1:mnist/4": 3}
    assert log(allocate([KEY])) == {KEY: 2}                  # a re-import: the same number
    assert log(submit("b"))["number"] == 4                   # later jobs follow them


def test_an_imported_job_is_finished_held_by_its_box_and_notes_its_origin(log):
    number = log(allocate([KEY]))[KEY]
    job = log(imported(number))
    assert job["id"] == "mnist/1" and job["state"] == "success" and job["node"] == "n1"
    assert job["attempts"] == 1 and job["parts"] == [] and job["gpus"] == []
    assert job["imported"]["job"] == "mnist/3" and job["user"] == "bob"
    assert job["history"][-1][1].startswith("imported from lab-a (its mnist/3) by bob")
    assert log.state.held_gpus("n1") == {} and log.state.active_index.node_load("n1") == 0   # never active


def test_the_same_key_again_answers_the_job_it_made(log):
    number = log(allocate([KEY]))[KEY]
    first = log(imported(number))
    assert log(allocate([KEY])) == {KEY: number}
    assert log(imported(number, ts=9.0)) == first
    assert len(log.state.jobs) == 1


def test_a_number_not_allocated_to_the_key_is_refused(log):
    log(allocate([KEY]))
    with pytest.raises(Conflict, match="not allocated"):
        log(imported(7))
    with pytest.raises(Conflict, match="not allocated"):
        log(imported(1, key="import:fp1:other/1"))


def test_only_finished_jobs_are_imported_and_only_by_the_box_that_holds_them(log):
    log(node("n2"))
    number = log(allocate([KEY]))[KEY]
    with pytest.raises(InvalidSpec, match="final state"):
        log(imported(number, state="running"))
    with pytest.raises(Forbidden, match="may not import"):
        log(imported(number, proposer="n2"))


def test_a_deleted_import_comes_back_under_a_new_number(log):
    number = log(allocate([KEY]))[KEY]
    log(imported(number))
    log({"op": "job.delete", "job": f"mnist/{number}", "ts": 7.0, "proposer": "n1"})
    again = log(allocate([KEY]))[KEY]
    assert again == number + 1
    assert log(imported(again))["id"] == f"mnist/{again}"


def test_an_archived_import_is_still_found_by_its_key(log):
    number = log(allocate([KEY]))[KEY]
    log(imported(number))
    log({"op": "job.archive", "jobs": [f"mnist/{number}"], "ts": 8.0, "term": 3})
    assert f"mnist/{number}" not in log.state.jobs
    assert log(allocate([KEY])) == {KEY: number}
    assert log(imported(number))["id"] == f"mnist/{number}"


def test_keys_must_be_import_keys(log):
    with pytest.raises(InvalidSpec):
        log(allocate(["k1"]))
    log(allocate(["import:x"], project="other"))
    with pytest.raises(Conflict, match="something else"):
        log(allocate(["import:x"], project="mnist"))
