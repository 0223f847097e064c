"""Migrations on fresh and existing files, reopen, pragmas."""

from __future__ import annotations

import sqlite3

import pytest

from floydd.errors import Conflict, Unavailable
from floydd.records import MIGRATIONS, Records
from floydd.records._migrations import Migrations
from floydd.records._schema import migrate

ALL = ["m001_initial", "m002_metric_stats", "m003_cluster_attempt", "m004_log_behind"]


def applied(path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY id")]


def test_fresh_file_gets_every_migration(tmp_path):
    path = tmp_path / "sub" / "records.db"  # the folder is created too
    with Records(path) as r:
        assert r.list_projects() == []
    assert applied(path) == ALL
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"projects", "jobs", "metric_names", "metrics", "metric_stats", "events", "samples"} <= tables


def test_reopen_keeps_data_and_applies_nothing_twice(tmp_path):
    path = tmp_path / "records.db"
    with Records(path) as r:
        n = r.allocate_job("mnist", {"command": "python train.py", "params": {"lr": "0.1"}})
        r.add_metrics("mnist", n, [("loss", 0.5, 1, 10.0)], log_offset=120)
        r.add_event("mnist", n, "note", "hello", {"k": 1})
        r.delete_job("mnist", r.allocate_job("mnist", {}))
    with Records(path) as r:
        assert r.get_job("mnist", 1)["params"] == {"lr": "0.1"}
        assert r.metric_series("mnist", 1) == {"loss": [(1, 0.5, 10.0)]}
        assert r.get_log_offset("mnist", 1) == 120
        assert [e["data"] for e in r.events("mnist", 1)] == [{"k": 1}]
        assert r.allocate_job("mnist", {}) == 3  # numbering survives a restart, 2 stays used
    assert applied(path) == ALL


def test_existing_file_at_an_older_schema_is_upgraded_with_its_data(tmp_path):
    path = tmp_path / "records.db"
    conn = sqlite3.connect(path, isolation_level=None)
    MIGRATIONS.apply(conn, stop_before="m002_metric_stats")
    conn.execute("INSERT INTO projects (id, name, created) VALUES (1, 'old', 0)")
    conn.execute("INSERT INTO jobs (id, project_id, number, state, created) VALUES (7, 1, 1, 'running', 0)")
    conn.execute("INSERT INTO metric_names (id, name) VALUES (1, 'loss'), (2, 'acc')")
    conn.executemany("INSERT INTO metrics (job_id, name_id, step, value, ts) VALUES (7, ?, ?, ?, ?)",
                     [(1, 1, 0.9, 1.0), (2, 1, 0.1, 1.0), (1, 2, 0.4, 2.0), (1, 3, 0.6, 3.0)])
    conn.close()
    assert applied(path) == ["m001_initial"]

    with Records(path) as r:
        summary = r.metric_summary("old", 1)
        assert summary["loss"] == {"last": 0.6, "last_step": 3, "last_ts": 3.0, "min": 0.4, "max": 0.9, "count": 3}
        assert summary["acc"]["count"] == 1
        r.add_metrics("old", 1, [("loss", 0.1, 4, 4.0)])  # stats keep counting from the backfill
        assert r.metric_summary("old", 1)["loss"]["count"] == 4
        assert r.metric_summary("old", 1)["loss"]["min"] == 0.1
    assert applied(path) == ALL


def test_failing_migration_leaves_no_trace(tmp_path):
    path = tmp_path / "records.db"
    Records(path).close()
    broken = Migrations("floydd.records")
    for m in MIGRATIONS._migrations:
        broken(name=m.name)(m.fn)

    @broken()
    def m999_broken(db):
        db.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    conn = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(RuntimeError, match="boom"):
        migrate(conn, broken)
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone() == (0,)
    conn.close()
    assert applied(path) == ALL


def test_a_file_whose_migrations_sqlite_utils_applied_reads_the_same(tmp_path):
    """records.db files written before floydd dropped sqlite-utils: the same table, nothing
    applied twice, a newer migration applied on top and recorded after them."""
    sqlite_utils = pytest.importorskip("sqlite_utils")
    path = tmp_path / "records.db"
    conn = sqlite3.connect(path, isolation_level=None)
    theirs = sqlite_utils.Migrations("floydd.records")
    for m in MIGRATIONS._migrations[:2]:
        theirs(name=m.name)(m.fn)
    theirs.apply(sqlite_utils.Database(conn, execute_plugins=False))
    conn.close()
    assert applied(path) == ALL[:2]
    with Records(path) as r:
        r.ensure_project("p")
    assert applied(path) == ALL
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index' "
                            "AND tbl_name = '_sqlite_migrations'").fetchone() == (1,)


def test_file_from_a_newer_floydd_is_refused(tmp_path):
    path = tmp_path / "records.db"
    Records(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('floydd.records', 'm100_future', 'x')")
    with pytest.raises(Conflict, match="newer") as err:
        Records(path)
    assert "upgrade floydd" in err.value.hint


def test_wal_and_synchronous_normal_on_every_connection(tmp_path):
    path = tmp_path / "records.db"
    with Records(path) as r:
        pragmas = r.pragmas()
        for role in ("writer", "reader"):
            assert pragmas[role]["journal_mode"] == "wal"
            assert pragmas[role]["synchronous"] == 1  # NORMAL
            assert pragmas[role]["foreign_keys"] == 1
            assert pragmas[role]["busy_timeout"] > 0
        assert pragmas["reader"]["query_only"] == 1
        with sqlite3.connect(path) as other:  # WAL is a property of the file
            assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_closed_records_refuse_calls(tmp_path):
    r = Records(tmp_path / "records.db")
    r.ensure_project("p")
    r.list_projects()  # opens this thread's reader
    r.close()
    r.close()  # idempotent
    with pytest.raises(Unavailable):
        r.list_projects()
    with pytest.raises(Unavailable):
        r.ensure_project("q")


def test_reads_from_worker_threads_then_close(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    r = Records(tmp_path / "records.db")
    n = r.allocate_job("p", {"command": "x"})
    with ThreadPoolExecutor(4) as pool:
        assert all(job["id"] == "p/1" for job in pool.map(lambda _: r.get_job("p", n), range(40)))
        r.close()
        with pytest.raises(Unavailable):
            pool.submit(r.get_job, "p", n).result()
