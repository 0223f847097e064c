"""``.floydignore``: gitignore-style patterns, as an ignore predicate for snapshots.

Supported, as in git: ``#`` comments, blank lines, ``!`` to re-include, trailing ``/`` for
folders only, a ``/`` at the start or in the middle anchors the pattern at the root
(otherwise it matches at any depth), ``*``, ``?``, ``[a-z]`` / ``[!a-z]`` classes, ``**/``,
``/**`` and ``/**/``; the last matching pattern wins. A file inside an ignored folder
stays ignored (the folder is never walked), as in git.

The predicate is ``rules(path, is_dir) -> bool`` with ``path`` relative and
``/``-separated; any callable of that shape can be given to ``Store.snapshot``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["IgnoreRules", "Ignore", "IGNORE_FILE"]

IGNORE_FILE = ".floydignore"

Ignore = Callable[[str, bool], bool]


class IgnoreRules:
    """Compiled ignore patterns; call it with ``(relative_path, is_dir)``."""

    def __init__(self, lines: Iterable[str] = ()) -> None:
        self._rules: list[tuple[re.Pattern[str], bool, bool]] = []  # regex, negate, dir_only
        for line in lines:
            rule = _compile(line)
            if rule is not None:
                self._rules.append(rule)

    @classmethod
    def from_file(cls, path: Path) -> IgnoreRules:
        return cls(Path(path).read_text(encoding="utf-8", errors="surrogateescape").splitlines())

    @classmethod
    def for_folder(cls, folder: Path) -> IgnoreRules:
        """The rules of ``folder/.floydignore``, or no rules if there is none."""
        path = Path(folder) / IGNORE_FILE
        return cls.from_file(path) if path.is_file() else cls()

    def __bool__(self) -> bool:
        return bool(self._rules)

    def __call__(self, path: str, is_dir: bool) -> bool:
        ignored = False
        for regex, negate, dir_only in self._rules:
            if dir_only and not is_dir:
                continue
            if regex.match(path):
                ignored = not negate
        return ignored


def _compile(line: str) -> tuple[re.Pattern[str], bool, bool] | None:
    line = line.rstrip("\n\r")
    if not line or line.startswith("#"):
        return None
    line = _strip_trailing_spaces(line)
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    elif line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    body = _translate(line)
    prefix = "" if anchored else "(?:.*/)?"
    return re.compile(f"^{prefix}{body}$", re.DOTALL), negate, dir_only


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "
    return stripped


def _translate(pattern: str) -> str:
    out: list[str] = []
    parts = pattern.split("/")
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if part == "**":
            if i == last:
                out.append(".*")           # a/** : everything inside
            else:
                out.append("(?:.*/)?")     # **/ and /**/ : zero or more folders
            continue
        out.append(_translate_part(part))
        if i != last:
            out.append("/")
    return "".join(out)


def _translate_part(part: str) -> str:
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        if c == "*":
            while i + 1 < n and part[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(part[i]))
        elif c == "[":
            j = part.find("]", i + 2 if i + 1 < n and part[i + 1] in "!^" else i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = part[i + 1:j]
                neg = body[:1] in ("!", "^")
                if neg:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[{'^' if neg else ''}{body}]" if not neg else f"(?!/)[^{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
