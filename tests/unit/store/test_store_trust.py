"""A store whose catalog or key cannot be trusted is refused, gc never empties it, uploads heal,
and a catalog is rebuilt from the trees in the store."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest

from floydd.store import Store
from floydd.errors import Untrusted
from floydd.store.care.rebuild import LOST_FOUND, rebuild_catalog
from store_testlib import describe, flip_byte, object_files, write_tree


def _src(tmp_path: Path, name: str, seed: int) -> Path:
    rnd = random.Random(seed)
    write_tree(tmp_path / name, {"big": rnd.randbytes(3 << 20), "small": rnd.randbytes(1000)})
    return tmp_path / name


def _object(store: Store, oid) -> Path:
    return store.root / "objects" / oid.hex[:2] / oid.hex


def test_a_fresh_store_opens_and_a_lost_catalog_or_key_is_refused(tmp_path: Path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        store.upload(_src(tmp_path, "a", 1), "a")
    (root / "catalog.db").rename(tmp_path / "catalog.bak")
    with pytest.raises(Untrusted, match="catalog.db is missing, but the store holds objects") as e:
        Store.open(root)
    assert "floydd repair" in e.value.hint and not (root / "catalog.db").exists()
    (tmp_path / "catalog.bak").rename(root / "catalog.db")
    (root / "key").rename(tmp_path / "key.bak")
    with pytest.raises(Untrusted, match="key is missing, but the store holds objects sealed under it"):
        Store.open(root)
    assert not (root / "key").exists(), "no new key was made"


def test_a_catalog_with_rows_floydd_never_writes_is_refused(tmp_path: Path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        store.upload(_src(tmp_path, "a", 1), "a")
    db = sqlite3.connect(root / "catalog.db")
    with db:
        db.execute("UPDATE versions SET tree = 'not hex at all'")
    db.close()
    with pytest.raises(Untrusted, match="row\\(s\\) that floydd never writes"):
        Store.open(root)


def test_gc_refuses_and_removes_nothing_when_the_catalog_is_damaged_under_it(store: Store, tmp_path: Path):
    store.upload(_src(tmp_path, "a", 1), "a")
    store.upload(_src(tmp_path, "b", 2), "b")
    store.catalog.delete("b")                   # garbage gc would remove, if it trusted the catalog
    store.catalog._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = object_files(store.root)
    path = store.root / "catalog.db"
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 4096 // 2 * 4096)
        f.write(random.Random(3).randbytes(4096))
    with pytest.raises(Untrusted, match="catalog.db is damaged"):
        store.gc()
    assert object_files(store.root) == before


@pytest.mark.parametrize("cached", [True, False], ids=["cache-hits", "read-again"])
def test_uploading_again_writes_a_good_copy_over_a_damaged_object(store: Store, tmp_path: Path, cached,
                                                                   no_racy_window):
    src = _src(tmp_path, "a", 1)
    first = store.upload(src, "a")
    chunk = sorted(store.read_tree(first.tree).chunk_ids())[0]
    flip_byte(_object(store, chunk))
    if not cached:
        for f in (store.root / "cache").iterdir():
            f.unlink()
    result = store.snapshot_report(src)
    assert result.tree == first.tree and result.stats.healed_objects == 1
    assert store.verify().ok
    store.restore(first.tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)


def test_a_catalog_is_rebuilt_from_the_trees_in_the_store(tmp_path: Path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        a1 = store.upload(_src(tmp_path, "a", 1), "a")
        a2 = store.upload(_src(tmp_path, "a2", 2), "a")
        gone = store.upload(_src(tmp_path, "g", 3), "gone")
        orphans = store.read_tree(gone.tree).chunk_ids()  # once its tree is gone, nothing names them
        stray = store.snapshot(_src(tmp_path, "s", 4))     # pinned under an upload lease only
        lost = store.snapshot(_src(tmp_path, "l", 5))
        store.catalog.unpin(next(h for t, hs in store.catalog.roots().items() if t == lost for h in hs))
        os.unlink(_object(store, gone.tree))
    before = (root / "catalog.db").read_bytes()

    dry = rebuild_catalog(root, versions=[a2], dry_run=True)     # a2: what the cluster knows, by number
    assert (root / "catalog.db").read_bytes() == before and dry.versions == ["a:2", "a:1"]
    rebuilt = rebuild_catalog(root, versions=[a2], deleted=lambda name, n: (name, n) == ("a", 1))
    assert rebuilt.versions == ["a:2"] and rebuilt.set_aside[0].name.startswith("catalog.db.damaged-")
    assert [line.split(" ")[0] for line in rebuilt.lost] == ["gone:1"] and rebuilt.damaged == 0
    assert len(rebuilt.found) == 2 and len(rebuilt.pins) == 1    # a:1 (deleted by the cluster) and lost
    with Store.open(root) as store:
        assert store.catalog.resolve("a:2").tree == a2.tree
        assert {v.tree for v in store.catalog.list(LOST_FOUND)} == {a1.tree, lost}
        assert stray in store.catalog.roots()
        assert store.gc().removed_objects == len(orphans) and store.verify().ok
        assert store.catalog.add_version("gone", a1.tree).version == 2, "numbers are never reused"
