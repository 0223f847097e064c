"""Walking a folder for a snapshot: what may enter a tree, decided before anything is read.

One pass of scandir + lstat, honouring the ignore predicate (an ignored folder is never
entered). Regular files, folders and symlinks that stay inside the tree are kept; a
FIFO, socket or device, a link leaving the tree (checked both on the real disk with
``realpath`` and by the manifest rules of :mod:`floydd.store.paths`) or a name a tree
cannot hold is refused with ``UnsafePath`` naming the file. Items come back sorted by
path bytes, the manifest's order, so packs fill and restores run in one pass.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from floydd.errors import NotFound, UnsafePath, UserError
from floydd.store.cache import Fingerprint, fingerprint
from floydd.store.ignore import Ignore
from floydd.store.paths import check_link, check_tree_path, is_within
from floydd.store.tree import Kind

__all__ = ["Item", "walk"]


@dataclass(slots=True)
class Item:
    """One entry found by the walk: ``rel`` relative to the root, ``abs`` absolute (bytes)."""

    rel: bytes
    abs: bytes
    kind: Kind
    mode: int
    fp: Fingerprint
    target: bytes = b""


def walk(src: Path, ignore: Ignore | None, exclude: Path | None) -> list[Item]:
    """Every entry below ``src`` that a tree may hold, sorted by path; refuses the rest."""
    try:
        root = Path(os.path.realpath(src))
        st = os.stat(root)
    except FileNotFoundError:
        raise NotFound(f"{src} does not exist", hint="check the path") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{src} is not a folder", hint="put the file(s) in a folder and snapshot the folder")
    root_b = os.fsencode(root)
    items: list[Item] = []
    links: dict[bytes, bytes] = {}
    stack: list[bytes] = [b""]
    while stack:
        rel_dir = stack.pop()
        abs_dir = root_b + b"/" + rel_dir if rel_dir else root_b
        try:
            with os.scandir(abs_dir) as it:
                dirents = sorted(it, key=lambda d: d.name)
        except PermissionError:
            raise UserError(f"cannot read folder {os.fsdecode(abs_dir)}: permission denied",
                             hint="fix its permissions or add it to .floydignore") from None
        subdirs = []
        for d in dirents:
            rel = rel_dir + b"/" + d.name if rel_dir else d.name
            is_dir = d.is_dir(follow_symlinks=False)
            if ignore is not None and ignore(os.fsdecode(rel), is_dir):
                continue
            if exclude is not None and is_dir and is_within(exclude, Path(os.fsdecode(d.path))):
                continue
            check_tree_path(rel, where=f"{os.fsdecode(d.path)}: ")
            lst = d.stat(follow_symlinks=False)
            mode = stat.S_IMODE(lst.st_mode) & 0o777
            if stat.S_ISDIR(lst.st_mode):
                items.append(Item(rel, d.path, Kind.DIR, mode, fingerprint(lst)))
                subdirs.append(rel)
            elif stat.S_ISREG(lst.st_mode):
                items.append(Item(rel, d.path, Kind.FILE, mode, fingerprint(lst)))
            elif stat.S_ISLNK(lst.st_mode):
                target = os.readlink(d.path)
                _check_real_link(root, d.path, target)
                links[rel] = target
                items.append(Item(rel, d.path, Kind.LINK, 0o777, fingerprint(lst), target))
            else:
                raise UnsafePath(f"{os.fsdecode(d.path)} is {_special_kind(lst.st_mode)}; "
                                 "a snapshot holds only files, folders and links inside it",
                                 hint="remove it or add it to .floydignore")
        stack.extend(reversed(subdirs))
    for rel, target in links.items():
        check_link(rel, target, links, where=f"{os.fsdecode(root_b + b'/' + rel)}: ")
    items.sort(key=lambda it: it.rel)  # manifest order: packs then restore in one pass
    return items


def _check_real_link(root: Path, link: bytes, target: bytes) -> None:
    """What the link resolves to on this disk must also be inside the folder."""
    if target.startswith(b"/") or not is_within(root, Path(os.path.realpath(os.fsdecode(link)))):
        raise UnsafePath(f"symlink {os.fsdecode(link)} -> {os.fsdecode(target)} points outside {root}",
                         hint="only links that stay inside the folder can be stored; "
                              "copy the file it points to, or add the link to .floydignore")


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"
