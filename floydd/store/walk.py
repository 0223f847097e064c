"""Walking a folder for a snapshot: what may enter a tree, decided before anything is read.

One pass of scandir + lstat over directory descriptors (:func:`floydd.security.beneath.walk`:
every folder is opened from its parent's descriptor without following a link, never by its
path from ``/``), honouring the ignore predicate (an ignored folder is never entered).
Regular files, folders and symlinks that stay inside the tree are kept; a FIFO, socket or
device, a link leaving the tree (checked both on the real disk, by letting the kernel
resolve it beneath the root, and by the manifest rules of :mod:`floydd.store.paths`) or a
name a tree cannot hold is refused with ``UnsafePath`` naming the file. Items come back
sorted by path bytes, the manifest's order, so packs fill and restores run in one pass.

The walk works on a folder descriptor the caller opened (:func:`open_source` for a path a
person names; a job's ``/output`` is opened by the runtime without following it), and the
snapshot later opens each file beneath that same descriptor (:class:`Files`), so a folder
swapped for a link while the daemon works is refused, never followed.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from floydd.errors import Conflict, NotFound, UnsafePath, UserError
from floydd.security import beneath
from floydd.store.cache import Fingerprint, fingerprint
from floydd.store.ignore import Ignore
from floydd.store.paths import check_link, check_tree_path
from floydd.store.tree import Kind

__all__ = ["Item", "walk", "open_source", "Files"]


@dataclass(slots=True)
class Item:
    """One entry found by the walk: ``rel`` relative to the root; ``abs``, the root's path
    joined with it (bytes), names it in messages and keys the file cache; it is never opened."""

    rel: bytes
    abs: bytes
    kind: Kind
    mode: int
    fp: Fingerprint
    target: bytes = b""


def open_source(src: Path) -> tuple[int, bytes]:
    """A descriptor of the folder ``src`` a person named (a link to a folder is fine: it is
    theirs to name), and its real path for messages and the file cache."""
    try:
        fd = beneath.open_root(src, follow=True)
    except FileNotFoundError:
        raise NotFound(f"{src} does not exist", hint="check the path") from None
    except NotADirectoryError:
        raise UserError(f"{src} is not a folder", hint="put the file(s) in a folder and snapshot the folder") from None
    except PermissionError:
        raise UserError(f"cannot read folder {src}: permission denied", hint="fix its permissions") from None
    return fd, os.fsencode(os.path.realpath(src))


def walk(root_fd: int, root: bytes, ignore: Ignore | None, exclude: Path | None) -> list[Item]:
    """Every entry beneath the folder ``root_fd`` (shown as ``root``) that a tree may hold,
    sorted by path; refuses the rest. ``exclude``: a folder never entered (the store's own)."""
    skip = _identity(exclude)
    items: list[Item] = []
    links: dict[bytes, bytes] = {}

    def failed(rel: bytes, exc: OSError) -> None:
        raise _unreadable(root, rel, exc)

    for f in beneath.walk(root_fd, on_error=failed):
        rel, shown = f.rel, root + b"/" + f.rel
        if ignore is not None and ignore(os.fsdecode(rel), f.is_dir):
            f.prune()
            continue
        try:
            lst = f.lstat()
        except OSError as exc:
            raise _unreadable(root, rel, exc) from None
        if skip is not None and stat.S_ISDIR(lst.st_mode) and (lst.st_dev, lst.st_ino) == skip:
            f.prune()
            continue
        try:
            check_tree_path(rel)
        except UnsafePath:
            check_tree_path(rel, where=f"{os.fsdecode(shown)}: ")
        mode = stat.S_IMODE(lst.st_mode) & 0o777
        if stat.S_ISDIR(lst.st_mode):
            items.append(Item(rel, shown, Kind.DIR, mode, fingerprint(lst)))
        elif stat.S_ISREG(lst.st_mode):
            items.append(Item(rel, shown, Kind.FILE, mode, fingerprint(lst)))
        elif stat.S_ISLNK(lst.st_mode):
            try:
                target = os.readlink(f.name, dir_fd=f.dir_fd)
            except OSError as exc:
                raise _unreadable(root, rel, exc) from None
            _check_real_link(root_fd, root, rel, target)
            links[rel] = target
            items.append(Item(rel, shown, Kind.LINK, 0o777, fingerprint(lst), target))
        else:
            raise UnsafePath(f"{os.fsdecode(shown)} is {_special_kind(lst.st_mode)}; "
                             "a snapshot holds only files, folders and links inside it",
                             hint="remove it or add it to .floydignore")
    for rel, target in links.items():
        check_link(rel, target, links, where=f"{os.fsdecode(root + b'/' + rel)}: ")
    items.sort(key=lambda it: it.rel)  # manifest order: packs then restore in one pass
    return items


class Files:
    """Opens the walked files for reading, each relative to its folder's descriptor (kept in
    a small cache: files come in path order, folder by folder), with ``O_NOFOLLOW``. A file
    or folder swapped for a link since the walk is refused as changed, never followed."""

    def __init__(self, root_fd: int) -> None:
        self._dirs = beneath.Dirs(root_fd)

    def open(self, it: Item) -> int:
        parent, name = beneath.split_rel(it.rel)
        shown = os.fsdecode(it.abs)
        try:
            dfd = self._dirs.get(parent)
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            raise Conflict(f"{shown} disappeared during the snapshot", hint="run the snapshot again") from None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
                raise Conflict(f"{shown} (or a folder on its path) was replaced by a link or a file while being "
                               "snapshotted; links are never followed", hint="run the snapshot again") from None
            raise UserError(f"cannot read {shown}: {e.strerror}",
                            hint="fix its permissions or add it to .floydignore") from None

    def close(self) -> None:
        self._dirs.close()


def _identity(folder: Path | None) -> tuple[int, int] | None:
    if folder is None:
        return None
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _unreadable(root: bytes, rel: bytes, exc: OSError) -> Exception:
    shown = os.fsdecode(root + b"/" + rel if rel else root)
    if exc.errno == errno.EACCES or exc.errno == errno.EPERM:
        return UserError(f"cannot read folder {shown}: permission denied",
                         hint="fix its permissions or add it to .floydignore")
    if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EXDEV, errno.EINVAL):   # EINVAL: a link
        # read as one (readlink) was swapped for a folder or a file since it was listed
        return Conflict(f"{shown} changed while being snapshotted (it was removed, moved or replaced by a link); "
                        "links are never followed", hint="run the snapshot again")
    return UserError(f"cannot read {shown}: {exc.strerror or exc}", hint="fix it or add it to .floydignore")


def _check_real_link(root_fd: int, root: bytes, rel: bytes, target: bytes) -> None:
    """What the link resolves to on this disk must also be inside the folder."""
    if target.startswith(b"/") or not beneath.resolves_inside(root_fd, rel):
        raise UnsafePath(f"symlink {os.fsdecode(root + b'/' + rel)} -> {os.fsdecode(target)} points outside "
                         f"{os.fsdecode(root)}",
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
