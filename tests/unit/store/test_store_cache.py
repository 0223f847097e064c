from __future__ import annotations

import os
from pathlib import Path

from floydd.store import Store
from store_testlib import describe, write_tree


def _src(tmp_path: Path) -> Path:
    write_tree(tmp_path / "src", {f"d{i}/f{j}": os.urandom(100 + j) for i in range(5) for j in range(20)}
               | {"big": os.urandom(3 << 20), "empty": b""})
    return tmp_path / "src"


def test_unchanged_files_are_not_read_again(store: Store, tmp_path: Path, no_racy_window, monkeypatch):
    src = _src(tmp_path)
    first = store.snapshot_report(src)
    assert first.cache_hits == 0
    import floydd.store.ingest as snap
    opened = []
    real = snap._open_checked
    monkeypatch.setattr(snap, "_open_checked", lambda it: opened.append(it) or real(it))
    again = store.snapshot_report(src)
    assert again.tree == first.tree
    assert again.cache_hits == 101 and opened == []
    assert again.stats.written_objects == 0


def test_fresh_files_are_not_trusted(store: Store, tmp_path: Path):
    src = _src(tmp_path)  # written just now: inside the racy window
    store.snapshot(src)
    assert store.snapshot_report(src).cache_hits == 0


def test_same_size_same_mtime_change_is_seen(store: Store, tmp_path: Path, no_racy_window):
    src = _src(tmp_path)
    store.snapshot(src)
    f = src / "d1" / "f3"
    st = f.stat()
    f.write_bytes(b"X" * st.st_size)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime tells
    report = store.snapshot_report(src)
    assert report.cache_hits == 100
    store.restore(report.tree, tmp_path / "out")
    assert (tmp_path / "out" / "d1" / "f3").read_bytes() == b"X" * st.st_size


def test_cache_entries_for_collected_chunks_are_ignored(store: Store, tmp_path: Path, no_racy_window):
    src = _src(tmp_path)
    store.upload(src, "x")
    store.catalog.delete("x")
    assert store.gc().removed_objects > 0
    report = store.snapshot_report(src)
    assert report.cache_hits == 0
    store.restore(report.tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(src)


def test_broken_cache_costs_a_read_not_correctness(store: Store, tmp_path: Path, no_racy_window):
    src = _src(tmp_path)
    first = store.snapshot(src)
    for p in (store.root / "cache").iterdir():
        p.write_bytes(b"garbage" * 100)
    report = store.snapshot_report(src)
    assert report.tree == first
