from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from floydd.errors import FloyddError, IntegrityError, UnsafePath
from floydd.store import Entry, Kind, ObjectId, Tree
from floydd.store.tree import MAGIC

CHUNK = ObjectId(b"\x01" * 32)
F, D, L = 0, 1, 2


def raw(rows, version=1) -> bytes:
    return msgpack.packb([MAGIC, version, rows], use_bin_type=True)


def row(path: bytes, kind=F, mode=0o644, size=0, chunks=b"", target=b"", offset=-1):
    return [path, kind, mode, size, chunks, target, offset]


def test_round_trip_and_deterministic():
    tree = Tree((
        Entry(path="d", kind=Kind.DIR, mode=0o755),
        Entry(path="d/f", kind=Kind.FILE, mode=0o600, size=3, chunks=(CHUNK,), offset=5),
        Entry(path="empty", kind=Kind.DIR, mode=0o700),
        Entry(path="l", kind=Kind.LINK, mode=0o777, target="d/f"),
        Entry(path="z", kind=Kind.FILE, size=10, chunks=(CHUNK, CHUNK)),
    ))
    data = tree.encode()
    assert Tree.decode(data) == tree
    assert Tree(tuple(reversed(tree.entries))).encode() == data
    assert tree.size == 13 and tree.files == 2
    assert tree.chunk_ids() == {CHUNK}
    assert tree.entries[1].to_dict()["offset"] == 5


def test_non_utf8_names_survive():
    tree = Tree((Entry(path="\udcff\udcfe", kind=Kind.FILE),))
    assert Tree.decode(tree.encode()).entries[0].raw_path == b"\xff\xfe"


@pytest.mark.parametrize("rows", [
    [row(b"../escape", size=1, chunks=CHUNK.raw)],
    [row(b"/abs")],
    [row(b"a\\b")],
    [row(b"a\x00b")],
    [row(b"a/./b")],
    [row(b"a//b")],
    [row(b"x"), row(b"x")],                                   # duplicate
    [row(b"b"), row(b"a")],                                   # unsorted
    [row(b"a/b")],                                            # parent missing
    [row(b"a"), row(b"a/b")],                                 # parent is a file
    [row(b"a", L, target=b"/tmp"), row(b"a/evil")],           # link-then-write
    [row(b"a", L, target=b"."), row(b"a/evil")],
    [row(b"l", L, target=b"../../etc/passwd")],
    [row(b"l", L, target=b"/etc/passwd")],
    [row(b"d", D), row(b"d/l", L, target=b"../../x")],
    [row(b"s", L, target=b"."), row(b"t", L, target=b"s/../etc")],
    [row(b"x", 7)],                                           # device/fifo/unknown kind
])
def test_hostile_manifests_are_refused(rows):
    with pytest.raises(UnsafePath):
        Tree.decode(raw(rows))


@pytest.mark.parametrize("data", [
    b"", b"garbage", msgpack.packb([b"other", 1, []]), raw([], version=2), raw("nope"),
    raw([row(b"a", mode=-1)]), raw([row(b"a", mode=0o17777)]), raw([row(b"a", size=-5)]),
    raw([row(b"a", size=1, chunks=b"\x01" * 31)]), raw([row(b"a", size=1)]),
    raw([row(b"a", size=0, chunks=CHUNK.raw)]), raw([row(b"d", D, size=3, chunks=CHUNK.raw)]),
    raw([row(b"a", target=b"x")]), raw([row(b"a", size=1, chunks=CHUNK.raw * 2, offset=0)]),
    raw([row(b"d", D, offset=0)]), raw([row(b"a", size=1, chunks=CHUNK.raw, offset=-2)]),
    raw([[b"a", 0, 0o644]]), raw([row(b"a", mode="x")]),
])
def test_malformed_manifests_are_integrity_errors(data):
    with pytest.raises(IntegrityError):
        Tree.decode(data, name="tree x")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_decode_of_random_bytes_only_raises_floydd_errors(data):
    try:
        Tree.decode(data)
    except FloyddError:
        pass


rows_strategy = st.lists(st.lists(st.one_of(st.binary(max_size=12), st.integers(-3, 70000),
                                            st.text(max_size=5)), min_size=7, max_size=7), max_size=6)


@settings(max_examples=150, deadline=None)
@given(rows_strategy)
def test_decode_of_random_structures_only_raises_floydd_errors(rows):
    try:
        Tree.decode(raw(rows))
    except FloyddError:
        pass
