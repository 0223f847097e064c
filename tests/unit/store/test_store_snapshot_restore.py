from __future__ import annotations

import os
import random
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from floydd.errors import Conflict, NotFound, UnsafePath
from floydd.store import IgnoreRules, Store
from floydd.store.ingest import PACK_FILE_MAX
from floydd.store.tree import Tree
from store_testlib import describe, object_files, write_tree

# -- round trips --------------------------------------------------------------------------

# "@" is how write_tree marks links, "/" and "\\" cannot be in a name
name_st = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\@"),
                  min_size=1, max_size=12).filter(lambda n: n not in (".", "..") and len(n.encode()) < 200)
size_st = st.one_of(st.integers(0, 64), st.integers(0, 40_000), st.sampled_from([PACK_FILE_MAX - 1, PACK_FILE_MAX,
                                                                                 PACK_FILE_MAX + 1]))


@st.composite
def trees(draw) -> dict[str, object]:
    spec: dict[str, object] = {}
    dirs = [""]
    for _ in range(draw(st.integers(0, 5))):
        parent = draw(st.sampled_from(dirs))
        path = f"{parent}{draw(name_st)}"
        if any(k.rstrip("/@") == path for k in spec):
            continue
        spec[path + "/"] = draw(st.sampled_from([0o755, 0o700, 0o555, 0o750]))
        dirs.append(path + "/")
    files = []
    for _ in range(draw(st.integers(0, 12))):
        path = draw(st.sampled_from(dirs)) + draw(name_st)
        if any(k.rstrip("/@") == path for k in spec):
            continue
        size = draw(size_st)
        data = random.Random(draw(st.integers(0, 3))).randbytes(size)  # repeats: dedup paths
        spec[path] = (data, draw(st.sampled_from([0o644, 0o600, 0o755, 0o400, 0o777, 0o640])))
        files.append(path)
    if files and draw(st.booleans()):
        link = draw(st.sampled_from(dirs)) + "lnk-" + draw(name_st)
        if not any(k.rstrip("/@") == link for k in spec):
            target = draw(st.sampled_from(files))
            spec[link + "@"] = os.path.relpath(target, os.path.dirname(link) or ".")
    return spec


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=trees())
def test_random_trees_round_trip(store: Store, spec):
    with tempfile.TemporaryDirectory() as tmp:
        src, dest = Path(tmp) / "src", Path(tmp) / "out" / "dest"
        write_tree(src, spec)
        tree_id = store.snapshot(src)
        store.restore(tree_id, dest)
        assert describe(dest) == describe(src)
        assert store.snapshot(src) == tree_id  # same content, same id
        tree = store.read_tree(tree_id)                    # the tree as the snapshot built it ...
        assert tree == Tree.decode(store._objects.get(tree_id)), "... is the tree as stored"
        assert store.tree_stats(tree_id) == (tree.size, tree.files)
        assert tree.files == sum(1 for k in spec if not k.endswith(("/", "@")))


def test_big_files_modes_empty_dirs_and_links(store: Store, tmp_path: Path):
    rnd = random.Random(9)
    spec = {"big.bin": (rnd.randbytes(9 << 20), 0o600), "mid.bin": rnd.randbytes(700 << 10),
            "empty/": 0o700, "a/b/c/": 0o755, "a/x.sh": (b"#!/bin/sh\n", 0o755), "zero": b"",
            "a/b/up@": "../x.sh", "top@": "a/b", "dot@": ".", "ro/": 0o500, "ro/f": (b"r", 0o444)}
    write_tree(tmp_path / "src", spec)
    tree_id = store.snapshot(tmp_path / "src")
    store.restore(tree_id, tmp_path / "dest")
    assert describe(tmp_path / "dest") == describe(tmp_path / "src")


def test_restore_into_existing_empty_folder(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {"f": b"data"})
    (tmp_path / "dest").mkdir()
    store.restore(store.snapshot(tmp_path / "src"), tmp_path / "dest")
    assert (tmp_path / "dest" / "f").read_bytes() == b"data"


def test_restore_refuses_a_non_empty_destination(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {"f": b"data"})
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "keep").write_text("mine")
    with pytest.raises(Conflict):
        store.restore(store.snapshot(tmp_path / "src"), tmp_path / "dest")
    assert os.listdir(tmp_path / "dest") == ["keep"]


def test_progress_goes_to_total(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {"a": os.urandom(3 << 20), "b": b"x" * 1000, "c": b""})
    calls: list[tuple[int, int]] = []
    tree_id = store.snapshot(tmp_path / "src", progress=lambda d, t: calls.append((d, t)))
    total = (3 << 20) + 1000
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    calls.clear()
    store.restore(tree_id, tmp_path / "out", progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, total) and calls[-1] == (total, total)


def test_ignore_predicate_and_floydignore(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {".floydignore": b"*.log\nbuild/\n!keep.log\n", "a.log": b"x", "keep.log": b"k",
                                   "build/out": b"o", "src/build/x": b"o", "src/main.py": b"p", "fifo-dir/": 0o755})
    os.mkfifo(tmp_path / "src" / "fifo-dir" / "pipe")
    rules = IgnoreRules(["*.log", "build/", "!keep.log", "fifo-dir/"])
    tree = store.read_tree(store.snapshot(tmp_path / "src", ignore=rules))
    assert sorted(e.path for e in tree.entries) == [".floydignore", "keep.log", "src", "src/main.py"]
    rules = IgnoreRules.for_folder(tmp_path / "src")
    assert rules("a.log", False) and not rules("keep.log", False)


def test_missing_or_non_folder_source(store: Store, tmp_path: Path):
    with pytest.raises(NotFound):
        store.snapshot(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception) as e:
        store.snapshot(tmp_path / "file")
    assert "not a folder" in str(e.value)


def test_store_inside_the_source_is_skipped(tmp_path: Path):
    s = Store.open(tmp_path / "src" / ".store")
    (tmp_path / "src" / "f").write_text("x")
    tree = s.read_tree(s.snapshot(tmp_path / "src"))
    assert [e.path for e in tree.entries] == ["f"]


# -- refused at snapshot ------------------------------------------------------------------

def _refused(store: Store, src: Path, needle: str) -> None:
    before = set(object_files(store.root))
    with pytest.raises(UnsafePath) as e:
        store.snapshot(src)
    assert needle in e.value.message, e.value.message
    assert e.value.hint
    assert set(object_files(store.root)) == before  # refused before anything was written


def test_fifo_refused(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {"ok": b"fine"})
    os.mkfifo(tmp_path / "src" / "pipe")
    _refused(store, tmp_path / "src", str(tmp_path / "src" / "pipe"))


def test_socket_refused(store: Store, tmp_path: Path):
    (tmp_path / "src").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "src" / "sock"))
        _refused(store, tmp_path / "src", "sock")
    finally:
        sock.close()


def test_device_refused(store: Store, tmp_path: Path):
    (tmp_path / "src").mkdir()
    try:
        os.mknod(tmp_path / "src" / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root (CI runs as root)")
    _refused(store, tmp_path / "src", "character device")


@pytest.mark.parametrize("target", ["/etc/passwd", "../outside", "../src-secret/x", "a/../../outside"])
def test_links_leaving_the_tree_refused_at_snapshot(store: Store, tmp_path: Path, target):
    write_tree(tmp_path / "src", {"a/f": b"x"})
    write_tree(tmp_path / "src-secret", {"x": b"secret"})
    os.symlink(target, tmp_path / "src" / "evil")
    _refused(store, tmp_path / "src", "evil")


def test_link_through_a_link_that_leaves_is_refused(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {"f": b"x"})
    os.symlink(".", tmp_path / "src" / "s")
    os.symlink("s/../outside", tmp_path / "src" / "t")
    _refused(store, tmp_path / "src", "t")


def test_backslash_in_a_name_refused(store: Store, tmp_path: Path):
    write_tree(tmp_path / "src", {"a\\b": b"x"})
    _refused(store, tmp_path / "src", "backslash")


# -- dedup --------------------------------------------------------------------------------

def test_one_byte_change_in_a_64_mib_file_stores_at_most_3_chunks(store: Store, tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    data = bytearray(random.Random(11).randbytes(64 << 20))
    (src / "big").write_bytes(data)
    first = store.snapshot_report(src)
    assert first.stats.written_objects > 40
    data[len(data) // 2] ^= 0x01
    (src / "big").write_bytes(data)
    second = store.snapshot_report(src)
    new_chunks = second.stats.written_objects - 1  # minus the new tree
    assert 1 <= new_chunks <= 3, second.stats


def test_a_copied_folder_dedups_small_files_too(store: Store, tmp_path: Path):
    rnd = random.Random(12)
    spec = {f"d{i}/f{j}": rnd.randbytes(rnd.randint(1, 30_000)) for i in range(10) for j in range(40)}
    spec["big"] = rnd.randbytes(5 << 20)
    write_tree(tmp_path / "a", spec)
    write_tree(tmp_path / "copy", spec)
    first = store.snapshot_report(tmp_path / "a")
    assert first.stats.written_objects < 40  # 400 small files went into a few packs
    second = store.snapshot_report(tmp_path / "copy")
    assert second.tree == first.tree and second.stats.written_objects == 0
    (tmp_path / "copy" / "d5" / "new").write_bytes(b"one more small file")
    third = store.snapshot_report(tmp_path / "copy")
    assert third.stats.written_objects <= 3  # one or two packs around it, and the tree
