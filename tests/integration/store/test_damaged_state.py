"""The corruption matrix: each damage × each file a box keeps, through the real daemon.

A database (records.db, the store's catalog.db, the control plane's raft.db) that is emptied,
cut short, has a page overwritten with random bytes, or lost its WAL after a crash is refused
at start, named, with ``floydd repair`` in the hint; after the repair the daemon starts with
every dataset version and job it had. A store object or tree damaged the same ways does not
stop the daemon: verify names it and the versions using it, gc removes nothing a version or
tree still needs, and uploading the same data again heals it.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from floydd.daemon.repair import repair
from floydd.errors import IntegrityError, Untrusted
from tests.integration.store._box import (DATABASES, copy_state, make_state, object_path, result,
                                          running)
from tests.unit.store.store_testlib import describe

pytestmark = pytest.mark.timeout(300)


def _empty(path: Path) -> None:
    os.truncate(path, 0)


def _truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _random_bytes(path: Path) -> None:
    """A page in the middle of a database (an object: 64 bytes in its middle) overwritten."""
    size, rnd = path.stat().st_size, random.Random(str(path))
    with open(path, "r+b") as f:
        if path.suffix == ".db":
            f.seek(size // 4096 // 2 * 4096)
            f.write(rnd.randbytes(4096))
        else:
            f.seek(size // 2)
            f.write(rnd.randbytes(64))


def _deleted(path: Path) -> None:
    """A database: its WAL deleted after a crash (the state is a kill -9 image). An object: gone."""
    Path(f"{path}-wal" if path.suffix == ".db" else path).unlink()


DAMAGES = {"empty": _empty, "truncated": _truncated, "random-bytes": _random_bytes, "deleted-wal": _deleted}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_state(tmp_path_factory.mktemp("made"))


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("db", DATABASES)
def test_a_damaged_database_is_refused_by_name_and_repair_brings_everything_back(made, tmp_path, db, damage):
    config = copy_state(made.crashed if damage == "deleted-wal" else made.clean, tmp_path / "state")
    path = config.state_dir / db
    DAMAGES[damage](path)

    with pytest.raises(Untrusted) as refused:
        with running(config):
            pass
    assert str(path) in refused.value.message and "never taken as \"no data\"" in refused.value.message
    assert f"floydd repair --state-dir {config.state_dir}" in refused.value.hint

    dry = repair(config, dry_run=True)
    assert [f.path for f in dry.found] == [path] and not list(path.parent.glob(f"{path.name}.damaged-*"))
    report = repair(config)
    assert report.left == [] and report.done, report
    assert list(path.parent.glob(f"{path.name}.damaged-*")), "the damaged file is set aside, never deleted"
    with running(config) as client:
        assert {v["ref"]: v["tree"] for v in client.datasets()} == made.versions
        assert made.job in {j["id"] for j in client.jobs()}
        result(client.clone("digits:1", tmp_path / "out"))
        gone = client.gc()
        verified = result(client.verify())
    assert describe(tmp_path / "out") == describe(made.data)
    assert verified["ok"] and verified["objects"] >= len(made.versions), (gone, verified)


def test_a_crash_image_with_its_wal_starts_with_nothing_lost(made, tmp_path):
    config = copy_state(made.crashed, tmp_path / "state")
    with running(config) as client:
        assert {v["ref"]: v["tree"] for v in client.datasets()} == made.versions
        assert client.job(made.job)["state"] == "success"


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("which", ["chunk", "tree"])
def test_a_damaged_object_is_named_never_collected_and_uploading_again_heals_it(made, tmp_path, which, damage):
    config = copy_state(made.clean, tmp_path / "state")
    oid = made.chunk if which == "chunk" else made.tree
    DAMAGES[damage](object_path(config, oid))
    users = {"digits:1", "digits:2"} if which == "chunk" else {"digits:1"}
    with running(config) as client:
        report = result(client.verify(repair=True))
        assert [(d["object"], set(d["versions"]) & users) for d in report["damaged"]] == [(oid, users)]
        assert "no other node holds a copy" in report["damaged"][0]["repair"]

        before = sorted(config.store_dir.glob("objects/*/*"))
        if which == "tree":                 # its chunks are unknown: gc must not call anything garbage
            with pytest.raises(IntegrityError, match="before removing anything"):
                client.gc()
        else:
            client.gc()
        assert sorted(config.store_dir.glob("objects/*/*")) == before

        healed = result(client.upload(made.data, "digits"))
        assert healed["tree"] == made.tree
        assert result(client.verify())["ok"]
        result(client.clone("digits:1", tmp_path / "one"))
        result(client.clone("digits:2", tmp_path / "two"))
    assert describe(tmp_path / "one") == describe(made.data)
    assert describe(tmp_path / "two") == describe(made.more)


def test_a_store_whose_catalog_was_deleted_is_refused_and_gc_never_empties_it(made, tmp_path):
    config = copy_state(made.clean, tmp_path / "state")
    (config.store_dir / "catalog.db").unlink()
    objects = sorted(config.store_dir.glob("objects/*/*"))
    with pytest.raises(Untrusted, match="catalog.db is missing, but the store holds objects"):
        with running(config):
            pass
    assert sorted(config.store_dir.glob("objects/*/*")) == objects


def test_a_deleted_store_key_is_refused_and_repair_touches_nothing(made, tmp_path):
    config = copy_state(made.clean, tmp_path / "state")
    key = config.store_dir / "key"
    shutil.move(key, tmp_path / "key.bak")
    with pytest.raises(Untrusted, match="key is missing, but the store holds objects"):
        with running(config):
            pass
    report = repair(config)
    assert report.left and "backup" in report.lost[0] and not (config.store_dir / "key").exists()


def test_gc_keeps_what_the_cluster_names_when_the_local_catalog_lags_behind(made, tmp_path):
    """An older (healthy) copy of the catalog put back: nothing in the file says so, but the
    cluster's catalog still names digits:1 and :2 as held here, and gc keeps their trees."""
    import sqlite3
    config = copy_state(made.clean, tmp_path / "state")
    db = sqlite3.connect(config.store_dir / "catalog.db")
    with db:
        db.execute("DELETE FROM versions WHERE name = 'digits'")
        db.execute("DELETE FROM pins")
    db.close()
    objects = sorted(config.store_dir.glob("objects/*/*"))
    with running(config) as client:
        assert client.gc()["removed"] == 0
        assert sorted(config.store_dir.glob("objects/*/*")) == objects
        result(client.clone("digits:2", tmp_path / "two"))
    assert describe(tmp_path / "two") == describe(made.more)


def _blank_raft_log(path: Path) -> None:
    from floydd.cluster.raft.sqlite_storage import SqliteStorage
    path.unlink()
    SqliteStorage(path).close()                         # its tables, and nothing in them


def _no_marker_blank_log(path: Path) -> None:
    _blank_raft_log(path)
    (path.parent / "imported-datasets").unlink()        # the records still name a job run for the cluster


@pytest.mark.parametrize("db, damage, evidence", [
    ("cluster/raft.db", Path.unlink, "imported-datasets says this box's datasets were entered into it"),
    ("cluster/raft.db", _blank_raft_log, "holds no log, but"),
    ("cluster/raft.db", _no_marker_blank_log, "names 1 job(s) this box ran for its cluster"),
    ("records.db", Path.unlink, "holds 1 job folder(s): the records of those jobs are gone"),
], ids=["raft-deleted", "raft-blank", "raft-blank-records-say", "records-deleted"])
def test_a_file_gone_while_others_show_it_held_data_is_refused_and_repaired(made, tmp_path, db, damage, evidence):
    config = copy_state(made.clean, tmp_path / "state")
    path = config.state_dir / db
    damage(path)
    with pytest.raises(Untrusted, match=str(path)) as refused:
        with running(config):
            pass
    assert evidence in refused.value.message
    assert repair(config).left == []
    with running(config) as client:
        assert {v["ref"]: v["tree"] for v in client.datasets()} == made.versions
        assert made.job in {j["id"] for j in client.jobs()}
