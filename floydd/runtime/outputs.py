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
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from floydd.errors import UnsafePath
from floydd.store.paths import check_link, check_tree_path

__all__ = ["Skipped", "Screened", "screen", "empty"]


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


def empty(root: Path, screened: Screened) -> bool:
    """Whether ``root`` holds nothing a snapshot would keep (no entry, or only skipped ones):
    a job that wrote nothing to /output makes no dataset version."""
    skipped = {s.path for s in screened.skipped}
    with os.scandir(root) as entries:
        return all(entry.name in skipped for entry in entries)


def screen(root: Path) -> Screened:
    """The entries below ``root`` a snapshot would refuse (blocking: call it in a thread)."""
    root = Path(root)
    if root.is_symlink():
        return Screened([Skipped("", f"/output is a link (to {os.readlink(root)}), not a folder")])
    root_b = os.fsencode(os.path.realpath(root))
    skipped: dict[bytes, str] = {}
    links: dict[bytes, bytes] = {}
    stack: list[bytes] = [b""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(root_b + b"/" + rel_dir if rel_dir else root_b) as it:
                entries = list(it)
        except OSError as exc:
            skipped[rel_dir] = f"the folder cannot be read ({exc.strerror})"
            continue
        for d in entries:
            rel = rel_dir + b"/" + d.name if rel_dir else d.name
            why = _problem(root_b, rel, d, links)
            if why:
                skipped[rel] = why
            elif d.is_dir(follow_symlinks=False):
                stack.append(rel)
    _drop_bad_links(links, skipped)
    return Screened([Skipped(os.fsdecode(rel), why) for rel, why in sorted(skipped.items())])


def _problem(root_b: bytes, rel: bytes, d: os.DirEntry, links: dict[bytes, bytes]) -> str:
    """Why the snapshot would refuse this entry, or "" (a link kept is added to ``links``)."""
    try:
        check_tree_path(rel)
    except UnsafePath as exc:
        return f"its name cannot be stored ({exc.message.rpartition(': ')[2]})"
    try:
        mode = d.stat(follow_symlinks=False).st_mode
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return ""
    if stat.S_ISREG(mode):
        try:
            os.close(os.open(d.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC))
        except OSError as exc:
            return f"it cannot be read ({exc.strerror})"
        return ""
    if stat.S_ISLNK(mode):
        target = os.readlink(d.path)
        real = os.fsencode(os.path.realpath(d.path))
        if target.startswith(b"/") or not (real == root_b or real.startswith(root_b + b"/")):
            return f"it is a link pointing outside /output (to {os.fsdecode(target)})"
        links[rel] = target
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
