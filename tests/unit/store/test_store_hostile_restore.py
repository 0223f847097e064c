"""Restore treats manifests as hostile input: nothing is ever written outside dest."""

from __future__ import annotations

import os
from pathlib import Path

import msgpack
import pytest

from floydd.errors import FloyddError, UnsafePath
from floydd.store import Entry, Kind, Store, Tree
from floydd.store.care.restore import restore
from floydd.store.tree import MAGIC


def _put_raw_tree(store: Store, rows) -> object:
    data = msgpack.packb([MAGIC, 1, rows], use_bin_type=True)
    with store._objects.writer() as w:
        oid = w.put(data)
        w.commit()
    return oid


def _chunk(store: Store, data: bytes):
    with store._objects.writer() as w:
        oid = w.put(data)
        w.commit()
    return oid


def _row(path, kind=0, size=0, chunks=b"", target=b"", offset=-1):
    return [path, kind, 0o644, size, chunks, target, offset]


@pytest.fixture
def arena(tmp_path: Path):
    """dest next to a sibling with a prefix-alike name, and a file outside."""
    (tmp_path / "data-secret").mkdir()
    (tmp_path / "outside.txt").write_text("original")
    return tmp_path


def _untouched(arena: Path) -> None:
    assert (arena / "outside.txt").read_text() == "original"
    assert os.listdir(arena / "data-secret") == []
    assert not (arena / "etc").exists()
    assert not os.path.lexists(arena / "data")
    assert not [p for p in arena.iterdir() if p.name.startswith(".data")]  # no half-restored sibling


@pytest.mark.parametrize("rows", [
    lambda c: [_row(b"../outside.txt", size=4, chunks=c)],
    lambda c: [_row(b"../data-secret/x", size=4, chunks=c)],
    lambda c: [_row(b"/etc/passwd", size=4, chunks=c)],
    lambda c: [_row(b"..\\outside.txt", size=4, chunks=c)],
    lambda c: [_row(b"a\x00b", size=4, chunks=c)],
    lambda c: [_row(b"l", 2, target=b".."), _row(b"l/outside.txt", size=4, chunks=c)],
    lambda c: [_row(b"l", 2, target=b"../data-secret")],
    lambda c: [_row(b"l", 2, target=b"../data-secret"), _row(b"l/x", size=4, chunks=c)],
    lambda c: [_row(b"s", 2, target=b"."), _row(b"t", 2, target=b"s/../data-secret")],
    lambda c: [_row(b"x", size=4, chunks=c), _row(b"x", size=4, chunks=c)],
])
def test_hostile_manifest_rejected_before_writing(store: Store, arena: Path, rows):
    c = _chunk(store, b"evil").raw
    tree_id = _put_raw_tree(store, rows(c))
    with pytest.raises(UnsafePath):
        store.restore(tree_id, arena / "data")
    _untouched(arena)


def test_link_then_write_fails_even_without_validation(arena: Path):
    """Defence in depth: hand restore() a tree that skipped decode's checks."""
    evil = Tree((Entry(path="l", kind=Kind.LINK, target=str(arena / "data-secret")),
                 Entry(path="l/x", kind=Kind.FILE, size=4, chunks=()),))
    with pytest.raises(FloyddError):
        restore(lambda oid: b"", evil, arena / "data")
    _untouched(arena)


def test_size_mismatch_is_refused(store: Store, arena: Path):
    c = _chunk(store, b"four").raw
    tree_id = _put_raw_tree(store, [_row(b"f", size=99, chunks=c)])
    with pytest.raises(FloyddError):
        store.restore(tree_id, arena / "data")
    _untouched(arena)


def test_offset_past_the_pack_is_refused(store: Store, arena: Path):
    c = _chunk(store, b"small pack").raw
    tree_id = _put_raw_tree(store, [_row(b"f", size=5, chunks=c, offset=8)])
    with pytest.raises(FloyddError):
        store.restore(tree_id, arena / "data")
    _untouched(arena)
