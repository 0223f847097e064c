"""What of a job's /output can be saved: every entry a snapshot may hold; the rest is skipped.

A snapshot (:mod:`floydd.store.walk`) refuses a whole folder for one entry it cannot hold,
which is right for an upload the user can fix and run again, but a job's /output is what
the job left behind, once. So :func:`screen` walks it first (names and lstat only, plus one
open per file to see it can be read) and names each entry the snapshot would refuse:

    a FIFO, a socket or a device       a link pointing outside /output (or through one)
    a file or folder that cannot be    a name a tree cannot hold (a backslash, too long)
    read

The snapshot then gets them as its ignore predicate and the rest is saved; the runtime
says which were skipped, and why, in the job's log and events. A /output that is itself
a link (a job without a sandbox can replace the folder) is not followed: nothing is saved.

The job may still be running (a checkpoint) and change /output while it is screened, so
everything goes through one folder descriptor the caller opened (:func:`open_output`) and
:func:`floydd.security.beneath.walk`: no entry is ever reached by a path from ``/``, and
an entry swapped for a link between the look and the open is skipped, never followed.
What appears after the screen and cannot be kept makes the snapshot refuse (``Conflict``,
``UnsafePath``): a checkpoint is then tried again later, a final save says why it failed.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from floydd.errors import UnsafePath
from floydd.security import beneath
from floydd.store.paths import check_link, check_tree_path

__all__ = ["Skipped", "Screened", "screen", "empty", "open_output"]


@dataclass(frozen=True, slots=True)
class Skipped:
    """One entry of /output that is not saved: its path below /output and why."""

    path: str
    why: str


class Screened:
    """The outcome of :func:`screen`: what to skip, as a list and as an ignore predicate."""

    def __init__(self, skipped: list[Skipped] | None = None) -> None:
        self.skipped = list(skipped or ())
        self._paths = frozenset(s.path for s in self.skipped)

    def ignore(self, path: str, is_dir: bool) -> bool:
        """The snapshot's ignore predicate (``path`` relative, ``/``-separated)."""
        return path in self._paths

    @property
    def everything(self) -> bool:
        """Whether nothing can be saved at all (/output itself is refused)."""
        return "" in self._paths


def open_output(root: Path) -> int | None:
    """A descriptor of the folder ``root`` (a job's /output), or None when it is absent or
    not a folder (a link to one is not followed)."""
    try:
        return beneath.open_root(root)
    except OSError:
        return None


def empty(root: Path, screened: Screened, *, dir_fd: int | None = None) -> bool:
    """Whether ``root`` (or the folder ``dir_fd`` when given) holds nothing a snapshot would
    keep (no entry, or only skipped ones): a job that wrote nothing to /output makes no
    dataset version."""
    skipped = {s.path for s in screened.skipped}
    with os.scandir(root if dir_fd is None else dir_fd) as entries:
        return all(entry.name in skipped for entry in entries)


def screen(root: Path, *, dir_fd: int | None = None) -> Screened:
    """The entries below ``root`` a snapshot would refuse (blocking: call it in a thread).
    With ``dir_fd``, the folder as the caller opened it (``root`` then only names it)."""
    root = Path(root)
    if dir_fd is None:
        if root.is_symlink():
            return Screened([Skipped("", f"/output is a link (to {os.readlink(root)}), not a folder")])
        fd = open_output(root)
        if fd is None:
            return Screened([Skipped("", "/output is not a folder")])
    else:
        fd = os.dup(dir_fd)
    try:
        return _screen(fd)
    finally:
        os.close(fd)


def _screen(root_fd: int) -> Screened:
    skipped: dict[bytes, str] = {}
    links: dict[bytes, bytes] = {}

    def unreadable(rel: bytes, exc: OSError) -> None:
        skipped[rel] = f"the folder cannot be read ({exc.strerror})"

    for f in beneath.walk(root_fd, on_error=unreadable):
        why = _problem(root_fd, f, links)
        if why:
            skipped[f.rel] = why
            f.prune()
    _drop_bad_links(links, skipped)
    return Screened([Skipped(os.fsdecode(rel), why) for rel, why in sorted(skipped.items())])


def _problem(root_fd: int, f: beneath.Found, links: dict[bytes, bytes]) -> str:
    """Why the snapshot would refuse this entry, or "" (a link kept is added to ``links``)."""
    try:
        check_tree_path(f.rel)
    except UnsafePath as exc:
        return f"its name cannot be stored ({exc.message.rpartition(': ')[2]})"
    try:
        mode = f.lstat().st_mode
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return ""
    if stat.S_ISREG(mode):
        try:
            os.close(os.open(f.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=f.dir_fd))
        except OSError as exc:
            return f"it cannot be read ({exc.strerror})"
        return ""
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(f.name, dir_fd=f.dir_fd)
        except OSError as exc:          # EINVAL: no longer a link (swapped while being looked at)
            return "it changed while being read" if exc.errno == errno.EINVAL else f"it cannot be read ({exc.strerror})"
        if target.startswith(b"/") or not beneath.resolves_inside(root_fd, f.rel):
            return f"it is a link pointing outside /output (to {os.fsdecode(target)})"
        links[f.rel] = target
        return ""
    return f"it is {_kind(mode)}"


def _drop_bad_links(links: dict[bytes, bytes], skipped: dict[bytes, str]) -> None:
    """Links the tree rules refuse (e.g. through another link that leaves), until none is left."""
    changed = True
    while changed:
        changed = False
        for rel, target in list(links.items()):
            try:
                check_link(rel, target, links)
            except UnsafePath as exc:
                skipped[rel] = f"the link cannot be stored: {exc.message}"
                del links[rel]
                changed = True


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "a special file")


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}
