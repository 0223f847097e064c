"""A box's record of a run, typed (floydd.model.Run): every column shape the records hold reads
back as its field (NULLs included), a row of an older schema reads its newer columns' defaults,
and the GPU count asked stays apart from the GPU ids held."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from floydd.errors import NotFound
from floydd.model import Mount, Resources, Run
from floydd.records import Records
from floydd.records._schema import MIGRATIONS

FULL = {"command": "python train.py", "params": {"lr": "0.1", "n": 3}, "code_tree": "c0de",
        "data": [{"ref": "mnist:2", "tree": "d474", "mount": "/input"}],
        "resources": {"gpus": 2, "cpu": False, "cpus": 8, "memory": 1 << 30}, "env": "pytorch",
        "message": "first try", "mode": "serve", "max_runtime": 3600.5, "created": 100.0, "node": "box-a",
        "user": "ada", "waiting_for": "GPUs", "latest": {"loss": 0.5}, "attempt": 3}


def test_every_column_reads_back_as_its_field(records):
    records.insert_job("mnist", 4, FULL)
    records.set_state("mnist", 4, "starting", gpus=[5, 1], workspace="/state/jobs/mnist/4")
    records.set_state("mnist", 4, "running", agent_pid=4242, started=101.0)
    records.set_state("mnist", 4, "failed", "exit 3", exit_code=3, ended=102.5, output_version="mnist/4/output:1")
    records.update_job("mnist", 4, waiting_for="GPUs")   # (leaving the queue cleared it)
    run = records.get_run("mnist", 4)
    assert run == Run(project="mnist", number=4, state="failed", reason="exit 3", attempt=3,
                      command="python train.py", params={"lr": "0.1", "n": 3}, code_tree="c0de",
                      data=(Mount(ref="mnist:2", tree="d474", mount="/input"),),
                      resources=Resources(gpu_count=2, cpus=8, memory=1 << 30), gpu_ids=(5, 1), env="pytorch",
                      message="first try", mode="serve", max_runtime=3600.5, created=100.0, started=101.0,
                      ended=102.5, exit_code=3, output_version="mnist/4/output:1", node="box-a",
                      workspace="/state/jobs/mnist/4", agent_pid=4242, user="ada", waiting_for="GPUs",
                      latest={"loss": 0.5})
    assert run.id == "mnist/4" and run.key == ("mnist", 4)
    assert run.resources.gpu_count == 2 and run.gpu_ids == (5, 1)   # asked for two; holds GPUs 5 and 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.state = "running"   # type: ignore[misc]
    with pytest.raises(TypeError):
        run.params["lr"] = "1"   # type: ignore[index]
    assert records.get_job("mnist", 4)["gpus"] == [5, 1]   # the dict reader, for the API, is unchanged


def test_nulls_and_defaults_read_as_none_or_the_defaults(records):
    number = records.allocate_job("p", {"created": 5.0, "code_tree": None, "max_runtime": None})
    run = records.get_run("p", number)
    assert run == Run(project="p", number=number, state="queued", created=5.0)
    assert (run.code_tree, run.max_runtime, run.started, run.ended, run.exit_code, run.output_version,
            run.agent_pid, run.latest) == (None,) * 8
    assert (run.reason, run.command, run.env, run.mode, run.workspace, run.node, run.user) == \
        ("", "", "default", "job", "", "", "")
    assert run.params == {} and run.data == () and run.gpu_ids == () and run.resources == Resources()
    records.update_job("p", number, output_version="")   # an empty /output: saved, no version
    assert records.get_run("p", number).output_version == ""


def test_a_row_of_an_older_schema_reads_the_newer_columns_defaults(tmp_path):
    path = tmp_path / "records.db"
    conn = sqlite3.connect(path, isolation_level=None)
    MIGRATIONS.apply(conn, stop_before="m003_cluster_attempt")
    conn.execute("INSERT INTO projects (id, name, created) VALUES (1, 'old', 0)")
    conn.execute("INSERT INTO jobs (project_id, number, state, created, gpus, resources) "
                 "VALUES (1, 1, 'running', 7, '[0]', '{\"gpus\": 1, \"cpu\": false}')")
    conn.close()
    with Records(path) as r:
        run = r.get_run("old", 1)
        assert run.attempt == 0 and run.resources.gpu_count == 1 and run.gpu_ids == (0,)
        assert r.list_runs(states=["running"]) == [run] and r.list_runs(states=["queued"]) == []
    # a row as an older records module read it, without the attempt column at all
    row = {"project": "old", "number": 1, "state": "success", "created": 7.0, "gpus": [], "resources": {}}
    assert Run.from_row(row).attempt == 0


def test_resources_this_version_cannot_read_are_no_resources_asked(records):
    records.insert_job("p", 1, {"created": 1.0, "resources": {"gpus": -1, "nodes": "many"}})
    assert records.get_run("p", 1).resources == Resources()


def test_list_runs_is_list_jobs_typed_and_a_missing_run_is_not_found(records):
    for n in (1, 2, 3):
        records.insert_job("a" if n < 3 else "b", n, {"created": float(n)})
    records.set_state("a", 2, "starting")
    assert [r.id for r in records.list_runs()] == [j["id"] for j in records.list_jobs()] == ["b/3", "a/2", "a/1"]
    assert [r.id for r in records.list_runs("a", ["starting"])] == ["a/2"]
    with pytest.raises(NotFound):
        records.get_run("a", 9)
