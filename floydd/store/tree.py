"""Trees: the manifest of one folder snapshot, itself stored as a sealed object.

A tree lists every entry below the snapshot root, sorted by path bytes: folders (empty
ones too), regular files (mode, size, chunk ids in order) and symlinks whose target stays
inside the tree. A small file lives inside a *pack* (one object holding several small
files back to back): its entry has one chunk, the pack, and the ``offset`` of its bytes. Encoding is deterministic msgpack, so the same folder content always has
the same tree id, and a snapshot is one id.

``decode`` treats its input as hostile (it may come from a peer, or from a store someone
else could write): every path, mode, size and id is checked, entries must be strictly
sorted and unique, every parent must be a folder entry (so nothing is ever written
through a symlink), and every link must resolve inside the tree. Anything else is
``UnsafePath`` or ``IntegrityError`` before a single byte is restored.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

import msgpack

from floydd.errors import IntegrityError, UnsafePath
from floydd.store.ids import ID_SIZE, ObjectId
from floydd.store.paths import check_link, check_tree_path

__all__ = ["Kind", "Entry", "Tree", "MAGIC"]

MAGIC = b"floydd-tree"
_VERSION = 1
_MAX_ENTRIES = 50_000_000
_MAX_SIZE = 1 << 62


class Kind(enum.StrEnum):
    FILE = "file"
    DIR = "dir"
    LINK = "link"


_CODES = {Kind.FILE: 0, Kind.DIR: 1, Kind.LINK: 2}
_KINDS = {v: k for k, v in _CODES.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One file, folder or link; ``path`` is relative, ``/``-separated."""

    path: str
    kind: Kind
    mode: int = 0o644
    size: int = 0
    chunks: tuple[ObjectId, ...] = ()
    target: str = ""
    offset: int | None = None   # set for a small file stored inside a pack (``chunks == (pack,)``)

    @property
    def raw_path(self) -> bytes:
        return os.fsencode(self.path)

    def to_dict(self) -> dict:
        d = {"path": self.path, "kind": str(self.kind), "mode": self.mode, "size": self.size}
        if self.kind is Kind.FILE:
            d["chunks"] = [str(c) for c in self.chunks]
            if self.offset is not None:
                d["offset"] = self.offset
        if self.kind is Kind.LINK:
            d["target"] = self.target
        return d


@dataclass(frozen=True, slots=True)
class Tree:
    entries: tuple[Entry, ...] = field(default=())

    @property
    def size(self) -> int:
        return sum(e.size for e in self.entries if e.kind is Kind.FILE)

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if e.kind is Kind.FILE)

    def chunk_ids(self) -> set[ObjectId]:
        return {c for e in self.entries for c in e.chunks}

    def encode(self) -> bytes:
        rows = []
        for e in sorted(self.entries, key=lambda e: e.raw_path):
            rows.append([e.raw_path, _CODES[e.kind], e.mode, e.size,
                         b"".join(c.raw for c in e.chunks), os.fsencode(e.target),
                         -1 if e.offset is None else e.offset])
        return msgpack.packb([MAGIC, _VERSION, rows], use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes, *, name: str = "tree") -> Tree:
        """Parse and validate an untrusted manifest."""
        try:
            doc = msgpack.unpackb(data, raw=True, use_list=True, strict_map_key=True,
                                  max_bin_len=len(data), max_array_len=_MAX_ENTRIES)
        except Exception as e:
            raise _bad(name, f"not a manifest ({type(e).__name__})") from None
        if not (isinstance(doc, list) and len(doc) == 3 and doc[0] == MAGIC):
            raise _bad(name, "not a manifest")
        if doc[1] != _VERSION:
            raise _bad(name, f"manifest version {doc[1]!r} is not supported",
                       hint="upgrade floydd on this node")
        rows = doc[2]
        if not isinstance(rows, list):
            raise _bad(name, "malformed entry list")
        entries = [_decode_row(row, name) for row in rows]
        _check_structure(entries, name)
        return cls(tuple(Entry(path=os.fsdecode(path), kind=kind, mode=mode, size=size, chunks=chunks,
                               target=os.fsdecode(target), offset=offset)
                         for path, kind, mode, size, chunks, target, offset in entries))


def validate(tree: Tree, *, where: str = "") -> None:
    """The structural rules of ``decode``, for a tree built in memory (snapshot)."""
    rows = [(e.raw_path, e.kind, e.mode, e.size, e.chunks, os.fsencode(e.target), e.offset)
            for e in sorted(tree.entries, key=lambda e: e.raw_path)]
    for path, *_ in rows:
        check_tree_path(path, where=where)
    _check_structure(rows, where or "tree")


# -- helpers ----------------------------------------------------------------------------

def _decode_row(row: object, name: str) -> tuple:
    if not (isinstance(row, list) and len(row) == 7):
        raise _bad(name, "malformed entry")
    path, code, mode, size, chunks, target, offset = row
    if not isinstance(path, bytes):
        raise _bad(name, "entry path is not bytes")
    check_tree_path(path, where=f"{name}: ")
    kind = _KINDS.get(code) if isinstance(code, int) else None
    if kind is None:
        raise UnsafePath(f"{name}: entry {path!r:.200} has unknown kind {code!r:.20}",
                         hint="only files, folders and symlinks can be restored")
    if not (isinstance(mode, int) and 0 <= mode <= 0o7777):
        raise _bad(name, f"entry {path!r:.200} has a bad mode")
    if not (isinstance(size, int) and 0 <= size <= _MAX_SIZE):
        raise _bad(name, f"entry {path!r:.200} has a bad size")
    if not (isinstance(chunks, bytes) and len(chunks) % ID_SIZE == 0):
        raise _bad(name, f"entry {path!r:.200} has malformed chunk ids")
    if not isinstance(target, bytes):
        raise _bad(name, f"entry {path!r:.200} has a malformed link target")
    ids = tuple(ObjectId(chunks[i:i + ID_SIZE]) for i in range(0, len(chunks), ID_SIZE))
    if kind is not Kind.FILE and (ids or size):
        raise _bad(name, f"{kind} entry {path!r:.200} has content")
    if kind is Kind.FILE and bool(ids) != bool(size):
        raise _bad(name, f"file {path!r:.200} has size {size} but {len(ids)} chunks")
    if kind is not Kind.LINK and target:
        raise _bad(name, f"entry {path!r:.200} has a link target but is not a link")
    if not (isinstance(offset, int) and -1 <= offset <= _MAX_SIZE):
        raise _bad(name, f"entry {path!r:.200} has a bad offset")
    if offset >= 0 and (kind is not Kind.FILE or len(ids) != 1):
        raise _bad(name, f"entry {path!r:.200} has an offset but is not a packed file")
    return path, kind, mode, size, ids, target, (None if offset < 0 else offset)


def _check_structure(rows: list[tuple], name: str) -> None:
    kinds: dict[bytes, Kind] = {}
    links: dict[bytes, bytes] = {}
    previous = None
    for path, kind, _mode, _size, _chunks, target, _offset in rows:
        if previous is not None and path <= previous:
            raise UnsafePath(f"{name}: entry {path!r:.200} is duplicated or out of order",
                             hint="the manifest was not written by floydd; do not restore it")
        previous = path
        parent, _, _ = path.rpartition(b"/")
        if parent and kinds.get(parent) is not Kind.DIR:
            what = "a symlink" if kinds.get(parent) is Kind.LINK else "not a folder in the tree"
            raise UnsafePath(f"{name}: entry {path!r:.200} lies under {parent!r:.200}, which is {what}",
                             hint="a manifest may not write through links; do not restore it")
        kinds[path] = kind
        if kind is Kind.LINK:
            links[path] = target
    for path, target in links.items():
        check_link(path, target, links, where=f"{name}: ")


def _bad(name: str, why: str, hint: str = "") -> IntegrityError:
    return IntegrityError(f"{name}: {why}", hint=hint or "the manifest is damaged or was not written by floydd")
