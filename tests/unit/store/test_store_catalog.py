from __future__ import annotations

import json
from pathlib import Path

import pytest

from floydd.errors import InvalidName, NotFound
from floydd.store import DatasetVersion, Store, check_name


@pytest.mark.parametrize("name", ["mnist", "a", "0", "my-data_v1.2", "x" * 64, "mnist/12/output", "a.b/1/output"])
def test_valid_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "Mnist", "-x", ".x", "_x", "x" * 65, "a b", "a/b", "a/0/output",
                                  "a/01/output", "a/1/outputs", "a/1/output/", "../x", "a..b", "a/1/../output",
                                  "ä", "a:b", None, 3, "mnist/x/output", "/abs"])
def test_invalid_names(name):
    with pytest.raises(InvalidName) as e:
        check_name(name)
    assert e.value.hint


@pytest.fixture
def trees(store: Store, tmp_path: Path):
    out = []
    for i in range(3):
        (tmp_path / f"src{i}").mkdir()
        (tmp_path / f"src{i}" / "f").write_bytes(b"x" * (i + 1))
        out.append(store.snapshot(tmp_path / f"src{i}"))
    return out


def test_versions_count_up_and_resolve(store: Store, trees):
    v1 = store.catalog.add_version("mnist", trees[0], message="first")
    v2 = store.catalog.add_version("mnist", trees[1])
    assert (v1.version, v2.version) == (1, 2)
    assert v1.ref == "mnist:1" and v1.size == 1 and v1.files == 1 and v1.message == "first"
    assert store.catalog.resolve("mnist") == v2
    assert store.catalog.resolve("mnist:latest") == v2
    assert store.catalog.resolve("mnist:1") == v1
    assert store.catalog.list() == [v1, v2]
    assert store.catalog.list("mnist") == [v1, v2]
    d = v1.to_dict()
    assert json.loads(json.dumps(d))["ref"] == "mnist:1" and d["tree"] == trees[0].hex


def test_job_output_names(store: Store, trees):
    v = store.catalog.add_version("mnist/12/output", trees[0])
    assert store.catalog.resolve("mnist/12/output:1") == v
    assert store.catalog.resolve("mnist/12/output") == v


def test_numbers_are_never_reused(store: Store, trees):
    store.catalog.add_version("d", trees[0])
    store.catalog.add_version("d", trees[1])
    assert store.catalog.delete("d", 2) == 1
    assert store.catalog.add_version("d", trees[2]).version == 3
    assert store.catalog.delete("d") == 2
    with pytest.raises(NotFound):
        store.catalog.resolve("d")
    assert store.catalog.add_version("d", trees[0]).version == 4


def test_not_found_hints_list_what_exists(store: Store, trees):
    store.catalog.add_version("mnist", trees[0])
    store.catalog.add_version("cifar", trees[1])
    with pytest.raises(NotFound) as e:
        store.catalog.resolve("mnist:7")
    assert "mnist:1" in e.value.hint
    with pytest.raises(NotFound) as e:
        store.catalog.resolve("imagenet")
    assert "cifar" in e.value.hint and "mnist" in e.value.hint
    with pytest.raises(NotFound):
        store.catalog.delete("mnist", 5)


@pytest.mark.parametrize("ref", ["mnist:", "mnist:0", "mnist:01", "mnist:x", "mnist:-1", "mnist:1:2", "Bad:1",
                                 "mnist:１"])
def test_bad_refs(store: Store, ref):
    with pytest.raises(InvalidName):
        store.catalog.resolve(ref)


def test_add_version_needs_an_existing_tree(store: Store):
    from floydd.store import ObjectId
    with pytest.raises(NotFound):
        store.catalog.add_version("x", ObjectId(b"\x07" * 32))
    with pytest.raises(InvalidName):
        store.catalog.add_version("Bad Name", ObjectId(b"\x07" * 32))


def test_catalog_survives_reopen(tmp_path: Path):
    s = Store.open(tmp_path / "s")
    (tmp_path / "src").mkdir()
    v = s.upload(tmp_path / "src", "empty", message="m")
    s.close()
    s2 = Store.open(tmp_path / "s")
    assert s2.catalog.resolve("empty:1") == v
    assert s2.read_tree(v.tree).entries == ()
    assert isinstance(v, DatasetVersion)
    import sqlite3
    db = sqlite3.connect(tmp_path / "s" / "catalog.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s2.close()
