"""Projects, numbering, job fields, state transitions, listing, deletion."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from floydd.errors import Conflict, InvalidName, InvalidSpec, NotFound
from floydd.model import FINAL_STATES, STATES, TRANSITIONS
from floydd.records import Records

JOB_KEYS = {"id", "project", "number", "state", "reason", "command", "params", "code_tree", "data",
            "resources", "gpus", "env", "message", "mode", "max_runtime", "created", "started", "ended",
            "exit_code", "output_version", "node", "workspace", "agent_pid", "user", "waiting_for", "latest",
            "attempt"}


def test_new_job_has_every_column_decoded(records):
    data = [{"ref": "mnist:3", "tree": "t" * 64, "mount": "/input"}]
    n = records.allocate_job("mnist", {"command": "python train.py", "params": {"lr": "0.1"}, "data": data,
                                       "resources": {"gpus": 2, "cpu": False}, "user": "ann", "created": 5.0})
    job = records.get_job("mnist", n)
    assert set(job) == JOB_KEYS
    assert job["id"] == "mnist/1" and job["number"] == 1 and job["state"] == "queued"
    assert job["data"] == data and job["resources"] == {"gpus": 2, "cpu": False}
    assert job["created"] == 5.0 and job["started"] is None and job["gpus"] == [] and job["latest"] is None
    [project] = records.list_projects()
    assert project["created"] > 0
    assert {**project, "created": 0} == {"name": "mnist", "owner": "ann", "created": 0, "jobs": 1, "last_number": 1}


def test_numbers_are_per_project_and_never_reused(records):
    assert [records.allocate_job("a", {}) for _ in range(3)] == [1, 2, 3]
    assert records.allocate_job("b", {}) == 1
    records.delete_job("a", 3)
    assert records.allocate_job("a", {}) == 4
    assert [j["number"] for j in records.list_jobs("a")] == [4, 2, 1]


def test_numbering_is_atomic_under_concurrent_threads(records):
    results: dict[str, list[int]] = {"p": [], "q": []}
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def submit(project: str) -> None:
        barrier.wait()
        for _ in range(25):
            number = records.allocate_job(project, {"command": "x"})
            with lock:
                results[project].append(number)

    threads = [threading.Thread(target=submit, args=("pq"[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for project in "pq":
        assert sorted(results[project]) == list(range(1, 101))  # no duplicates, no gaps
        assert len(records.list_jobs(project)) == 100


def test_unknown_or_unsettable_fields_are_programming_errors(records):
    with pytest.raises(TypeError, match="'colour'"):
        records.allocate_job("p", {"colour": "red"})
    n = records.allocate_job("p", {})
    with pytest.raises(TypeError, match="set_state"):
        records.update_job("p", n, state="running")
    with pytest.raises(TypeError, match="'gpus' must be list"):
        records.update_job("p", n, gpus="0,1")
    with pytest.raises(TypeError):
        records.update_job("p", n, exit_code=True)
    assert records.get_job("p", n)["gpus"] == []


def test_update_job_round_trips_each_kind_of_column(records):
    n = records.allocate_job("p", {})
    records.update_job("p", n, gpus=[0, 3], latest={"loss": 0.1}, exit_code=0, max_runtime=60,
                       output_version="p/1/output:1", agent_pid=4242, waiting_for="no GPU free")
    job = records.get_job("p", n)
    assert (job["gpus"], job["latest"], job["exit_code"], job["max_runtime"]) == ([0, 3], {"loss": 0.1}, 0, 60)
    assert (job["output_version"], job["agent_pid"], job["waiting_for"]) == ("p/1/output:1", 4242, "no GPU free")


def test_bad_project_names_and_missing_jobs(records):
    for bad in ("", "Has Caps", "a/b", "../x", "-x", "x" * 65):
        with pytest.raises(InvalidName):
            records.allocate_job(bad, {})
    with pytest.raises(NotFound) as err:
        records.get_job("mnist", 7)
    assert err.value.message == "job mnist/7 not found"
    assert err.value.hint == "floyd status lists this project's jobs"
    for call in (lambda: records.update_job("mnist", 7, message="x"), lambda: records.set_state("mnist", 7, "starting"),
                 lambda: records.delete_job("mnist", 7), lambda: records.events("mnist", 7),
                 lambda: records.get_log_offset("mnist", 7)):
        with pytest.raises(NotFound):
            call()


def test_life_of_a_job_sets_times_events_and_clears_waiting(records):
    n = records.allocate_job("p", {"waiting_for": "no GPU free"})
    records.set_state("p", n, "starting", "placed on gpus 0", gpus=[0])
    job = records.get_job("p", n)
    assert job["waiting_for"] == "" and job["gpus"] == [0] and job["started"] is None
    records.set_state("p", n, "running", agent_pid=99)
    started = records.get_job("p", n)["started"]
    assert started is not None
    records.set_state("p", n, "success", "exit 0", exit_code=0)
    job = records.get_job("p", n)
    assert (job["state"], job["reason"], job["exit_code"], job["started"]) == ("success", "exit 0", 0, started)
    assert job["ended"] >= started
    assert [(e["kind"], e["message"]) for e in records.events("p", n)] == [
        ("state", "queued → starting: placed on gpus 0"), ("state", "starting → running"),
        ("state", "running → success: exit 0")]


def test_given_timestamps_win(records):
    n = records.allocate_job("p", {})
    records.set_state("p", n, "starting")
    records.set_state("p", n, "running", started=100.0)
    records.set_state("p", n, "lost", "node rebooted", ended=200.0)
    job = records.get_job("p", n)
    assert (job["started"], job["ended"]) == (100.0, 200.0)


def test_refused_transition_changes_nothing(records):
    n = records.allocate_job("p", {})
    with pytest.raises(Conflict, match="job p/1 is queued; it cannot become running") as err:
        records.set_state("p", n, "running", agent_pid=5)
    assert "starting" in err.value.hint
    with pytest.raises(InvalidSpec, match="'runing' is not a job state"):
        records.set_state("p", n, "runing")
    job = records.get_job("p", n)
    assert (job["state"], job["agent_pid"], records.events("p", n)) == ("queued", None, [])
    records.set_state("p", n, "stopped", "by user")
    with pytest.raises(Conflict, match="cannot become starting") as err:
        records.set_state("p", n, "starting")
    assert "new job" in err.value.hint


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(STATES), max_size=8))
def test_state_machine_matches_the_model(path_states):
    with tempfile.TemporaryDirectory() as tmp, Records(Path(tmp) / "r.db") as records:
        n = records.allocate_job("p", {})
        state, accepted = "queued", 0
        for new in path_states:
            if new in TRANSITIONS[state]:
                records.set_state("p", n, new)
                state, accepted = new, accepted + 1
            else:
                with pytest.raises(Conflict):
                    records.set_state("p", n, new)
        job = records.get_job("p", n)
        assert job["state"] == state
        assert len(records.events("p", n)) == accepted
        assert (job["ended"] is not None) == (state in FINAL_STATES)


def test_list_jobs_filters_orders_and_limits(records):
    for project in ("a", "b", "a", "a"):
        records.allocate_job(project, {})
    records.set_state("a", 1, "starting")
    records.set_state("a", 3, "stopped")
    assert [j["id"] for j in records.list_jobs()] == ["a/3", "a/2", "b/1", "a/1"]
    assert [j["id"] for j in records.list_jobs("a", limit=2)] == ["a/3", "a/2"]
    assert [j["id"] for j in records.list_jobs(None, ["queued"])] == ["a/2", "b/1"]
    assert [j["id"] for j in records.list_jobs("a", "starting")] == ["a/1"]
    assert records.list_jobs(states=[]) == [] and records.list_jobs("nope") == []
    with pytest.raises(InvalidSpec):
        records.list_jobs(states=["queued", "done"])


def test_delete_cascades_to_metrics_events_samples_only_of_that_job(records):
    for _ in range(2):
        n = records.allocate_job("p", {})
        records.add_metrics("p", n, [("loss", 1.0, 1, 1.0), ("acc", 0.5, 1, 1.0)])
        records.add_event("p", n, "note", "x")
        records.add_system_samples("p", n, [{"ts": 1.0, "cpu_percent": 50.0, "rss_bytes": 1}])
    records.delete_job("p", 1)
    with pytest.raises(NotFound):
        records.get_job("p", 1)
    with sqlite3.connect(records.path) as conn:
        for table in ("metrics", "metric_stats", "events", "samples"):
            assert conn.execute(f"SELECT job_id, count(*) FROM {table} GROUP BY job_id").fetchall() == [(2, 2 if table.startswith("metric") else 1)]
    assert records.metric_summary("p", 2)["loss"]["count"] == 1


def test_public_surface_is_pinned():
    import floydd.records

    assert sorted(floydd.records.__all__) == ["MIGRATIONS", "Records"]
    assert FINAL_STATES == {s for s in STATES if not TRANSITIONS[s]}


def test_insert_job_takes_the_clusters_number_and_local_numbers_follow(records):
    records.insert_job("mnist", 7, {"command": "python train.py", "attempt": 2})
    job = records.get_job("mnist", 7)
    assert job["state"] == "queued" and job["attempt"] == 2
    with pytest.raises(Conflict):
        records.insert_job("mnist", 7, {"command": "again", "attempt": 3})
    assert records.allocate_job("mnist", {"command": "local"}) == 8  # never reuses a cluster number
    records.insert_job("mnist", 3, {"command": "late"})               # a lower number still fits
    assert records.allocate_job("mnist", {"command": "local"}) == 9
