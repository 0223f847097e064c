"""The safe-path rules, shared by snapshot (what may enter a tree) and restore (what a
manifest, untrusted input, may make us write).

A tree path is relative, ``/``-separated bytes: no leading ``/``, no empty, ``.`` or ``..``
component, no backslash, no NUL, at most 255 bytes a component and 4096 in all.

A symlink may stay in a tree only if following it, from where it sits, never leaves the
tree. That is decided by walking its target component by component and substituting
every link met on the way (as the kernel does), not by normalising the string: with
``s -> .``, the target ``s/../etc`` normalises to ``etc`` but resolves to the tree's
parent. Absolute targets are refused outright.

Containment of real paths compares components (``Path.is_relative_to``), never string
prefixes, so ``/data-secret`` is not inside ``/data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from floydd.errors import UnsafePath

__all__ = ["check_tree_path", "check_link", "is_within", "MAX_COMPONENT", "MAX_PATH"]

MAX_COMPONENT = 255
MAX_PATH = 4096
_MAX_HOPS = 40


def check_tree_path(path: bytes, *, where: str = "") -> None:
    """Raise ``UnsafePath`` unless ``path`` is a safe relative tree path."""
    why = _path_problem(path)
    if why:
        raise UnsafePath(f"{where}{_show(path)}: {why}",
                         hint="tree paths are relative, without '..', '.', '\\' or NUL; rename the file")


def check_link(link: bytes, target: bytes, links: Mapping[bytes, bytes], *, where: str = "") -> None:
    """Raise ``UnsafePath`` unless the symlink at ``link`` with ``target`` resolves inside
    the tree. ``links`` maps every symlink path of the tree to its target."""
    why = _link_problem(link, target, links)
    if why:
        raise UnsafePath(f"{where}symlink {_show(link)} -> {_show(target)} {why}",
                         hint="only links that stay inside the folder can be stored; "
                              "make it relative to a file inside, or copy the file it points to")


def is_within(root: Path, path: Path) -> bool:
    """True if ``path`` is ``root`` or below it, compared by components."""
    return Path(path).is_relative_to(Path(root))


def _path_problem(path: bytes) -> str:
    if not isinstance(path, bytes) or not path:
        return "empty path"
    if len(path) > MAX_PATH:
        return f"path longer than {MAX_PATH} bytes"
    if b"\x00" in path:
        return "contains a NUL byte"
    if b"\\" in path:
        return "contains a backslash"
    if path.startswith(b"/"):
        return "is absolute"
    for part in path.split(b"/"):
        if part in (b"", b".", b".."):
            return "has an empty, '.' or '..' component"
        if len(part) > MAX_COMPONENT:
            return f"has a component longer than {MAX_COMPONENT} bytes"
    return ""


def _link_problem(link: bytes, target: bytes, links: Mapping[bytes, bytes]) -> str:
    if not target:
        return "has an empty target"
    if len(target) > MAX_PATH or b"\x00" in target:
        return "has a malformed target"
    if b"\\" in target:
        return "has a backslash in its target"
    if target.startswith(b"/"):
        return "points to an absolute path, outside the tree"
    stack: list[bytes] = []
    todo = link.split(b"/")[:-1] + target.split(b"/")
    todo.reverse()
    hops = 0
    while todo:
        part = todo.pop()
        if part in (b"", b"."):
            continue
        if part == b"..":
            if not stack:
                return "points outside the tree"
            stack.pop()
            continue
        stack.append(part)
        here = b"/".join(stack)
        next_target = links.get(here)
        if next_target is None:
            continue
        hops += 1
        if hops > _MAX_HOPS:
            return "is part of a symlink loop"
        if not next_target or next_target.startswith(b"/"):
            return "goes through a link that points outside the tree"
        stack.pop()
        todo.extend(reversed(next_target.split(b"/")))
    return ""


def _show(path: bytes) -> str:
    return repr(path.decode("utf-8", "backslashreplace"))[1:-1][:300]
