from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from floydd.errors import Conflict, IntegrityError
from floydd.store import Store
from store_testlib import describe, flip_byte, object_files, wait_until_set, write_tree


def _src(tmp_path: Path, name: str, seed: int, size: int = 2 << 20) -> Path:
    rnd = random.Random(seed)
    write_tree(tmp_path / name, {"big": rnd.randbytes(size), "small": rnd.randbytes(1000), "d/": 0o755})
    return tmp_path / name


def test_gc_removes_only_unreferenced(store: Store, tmp_path: Path):
    a = store.upload(_src(tmp_path, "a", 1), "a")
    b = store.upload(_src(tmp_path, "b", 2), "b")
    before = len(object_files(store.root))
    assert store.gc().removed_objects == 0
    store.catalog.delete("b")
    report = store.gc()
    assert report.removed_objects > 0 and report.freed_bytes > 0
    assert report.kept_objects == len(object_files(store.root)) == before - report.removed_objects
    assert store.verify().ok
    store.restore(a.tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(tmp_path / "a")
    assert report.to_dict()["removed"] == report.removed_objects
    del b


def test_snapshot_is_pinned_until_its_lease_expires(store: Store, tmp_path: Path):
    tree = store.snapshot(_src(tmp_path, "a", 3))
    assert store.gc().removed_objects == 0
    store.restore(tree, tmp_path / "out")
    count = len(store.read_tree(tree).chunk_ids()) + 1
    store.catalog._db.execute("UPDATE pins SET expires = 0")
    assert store.gc().removed_objects == count
    assert object_files(store.root) == []


def test_keep_and_explicit_pins(store: Store, tmp_path: Path):
    tree = store.snapshot(_src(tmp_path, "a", 4))
    store.catalog._db.execute("DELETE FROM pins")
    assert store.gc(keep=[tree]).removed_objects == 0
    store.catalog.pin(tree, "job:mnist/1:code")
    assert store.gc().removed_objects == 0
    store.catalog.unpin("job:mnist/1:code")
    assert store.gc().removed_objects > 0


def test_gc_cannot_run_during_an_upload_that_reuses_garbage(store: Store, tmp_path: Path):
    src = _src(tmp_path, "a", 5, size=6 << 20)
    store.upload(src, "old")
    store.catalog.delete("old")  # everything is garbage now ...
    reading = threading.Event()
    go_on = threading.Event()
    result: dict = {}

    def progress(done, total):
        if done and not reading.is_set():
            reading.set()
            go_on.wait(30)

    def upload():  # ... but this upload finds those chunks stored and reuses them
        result["version"] = store.upload(src, "new", progress=progress)

    t = threading.Thread(target=upload)
    t.start()
    wait_until_set(reading)
    with pytest.raises(Conflict):
        store.gc(timeout=0.2)
    go_on.set()
    t.join(30)
    report = store.gc()
    assert report.removed_objects == 0
    store.restore(result["version"].tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)


def test_gc_stops_when_a_live_tree_is_unreadable(store: Store, tmp_path: Path):
    a = store.upload(_src(tmp_path, "a", 6), "a")
    store.upload(_src(tmp_path, "b", 7), "b")
    store.catalog.delete("b")
    flip_byte(store.root / "objects" / a.tree.hex[:2] / a.tree.hex)
    store._trees.clear()
    before = object_files(store.root)
    with pytest.raises(IntegrityError) as e:
        store.gc()
    assert "a:1" in e.value.message and "before removing anything" in e.value.message
    assert object_files(store.root) == before


def test_gc_cleans_temp_leftovers(store: Store, tmp_path: Path):
    store.upload(_src(tmp_path, "a", 8), "a")
    leftover = store.root / "objects" / "00" / (".tmp-" + "0" * 64 + "-1234")
    leftover.write_bytes(b"half an object")
    assert store.gc().temp_files_removed == 1
    assert not leftover.exists()
