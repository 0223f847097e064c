"""Snapshot a project's code folder into the store, honouring ``.floydignore``; and the
handles of code folders people sent (``POST /v1/code``).

A code folder is for code: above the configured size the snapshot is refused
with a hint to move the data into ``floyd data`` (or ``.floydignore``), before
anything is written.

People never hand the daemon a tree id (DESIGN 5c): a tree id names any tree of the store,
someone else's private dataset included. A client on another machine sends its folder to
``POST /v1/code`` and gets a handle, ``cu-`` and 32 hex digits (:class:`CodeUploads`), that
only this box knows, only for the person who sent it, for :data:`UPLOAD_TTL` seconds; the
submit names the handle. The daemon's own callers (a restart, a rerun, an import) use the
job's tree id inside the daemon, never from a request.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from floydd.errors import Forbidden, NotFound, UnsafePath, UserError
from floydd.model import CODE_UPLOAD_PATTERN
from floydd.store.ignore import IgnoreRules
from floydd.store.tarball import MAX_DEPTH

__all__ = ["snapshot_code", "code_size", "CodeUploads", "UPLOAD_TTL"]

UPLOAD_TTL = 3600.0
"""Seconds a code upload's handle is good for (the store's upload lease keeps its tree a day)."""
_MAX_HANDLES = 10_000
"""Handles kept at most (the oldest go first): memory stays bounded whatever is sent."""


def code_size(folder: Path, rules: IgnoreRules, limit: int) -> int:
    """Bytes the snapshot would hold; stops counting once past ``limit``. A folder deeper than
    an upload may be (:data:`~floydd.store.tarball.MAX_DEPTH`) is refused (issue 21: a code
    folder ~1,000 levels deep overflowed the recursion of ``os.walk``: a 500)."""
    total = 0
    todo: list[tuple[str, str, int]] = [(str(folder), "", 0)]     # (folder, its tree path + "/", depth)
    while todo:
        path, prefix, depth = todo.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue                    # the snapshot itself says what cannot be read
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if rules(prefix + entry.name, is_dir):
                continue
            if is_dir:
                if depth + 1 >= MAX_DEPTH:
                    raise UnsafePath(f"the code folder {folder} holds folders more than {MAX_DEPTH} levels deep "
                                     f"({(prefix + entry.name)[:120]}...)",
                                     hint=f"code is at most {MAX_DEPTH} folders deep: list the deep folder in "
                                          ".floydignore, or upload it as data (floyd data upload)")
                todo.append((entry.path, prefix + entry.name + "/", depth + 1))
                continue
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            if total > limit:
                return total
    return total
    return total


def snapshot_code(store, folder: Path, limit: int, **snapshot_kw):
    """The tree id of ``folder``'s code; refuses folders over ``limit`` bytes."""
    if not folder.is_dir():
        raise UserError(f"code folder {folder} does not exist", hint="run floyd from your project folder")
    rules = IgnoreRules.for_folder(folder)
    size = code_size(folder, rules, limit)
    if size > limit:
        raise UserError(
            f"the code folder {folder} holds more than {limit / 2**20:.0f} MiB",
            hint="upload data with `floyd data upload PATH --name NAME` and mount it with --data, "
                 "or list large files in .floydignore", code="code_too_large")
    return store.snapshot(folder, ignore=rules, **snapshot_kw)


class CodeUploads:
    """The code folders sent to this box, by handle: which tree, for whom, until when. In
    memory (a restart forgets them: ``floyd run`` sends the folder again), bound to this box."""

    def __init__(self, *, ttl: float = UPLOAD_TTL, clock: Callable[[], float] = time.monotonic,
                 limit: int = _MAX_HANDLES) -> None:
        self._ttl, self._clock, self._limit = ttl, clock, limit
        self._handles: OrderedDict[str, tuple[str, str, float]] = OrderedDict()

    def add(self, tree: str, person: str) -> str:
        """A new handle for ``tree``, which ``person`` sent."""
        now = self._clock()
        while self._handles and (len(self._handles) >= self._limit or next(iter(self._handles.values()))[2] <= now):
            self._handles.popitem(last=False)
        handle = f"cu-{secrets.token_hex(16)}"
        self._handles[handle] = (tree, person, now + self._ttl)
        return handle

    def tree(self, handle: str, person: str) -> str:
        """The tree of ``handle`` for ``person``; refused, saying why, for a handle that is not
        theirs, unknown here or expired. A handle stays good until it expires, so a submit
        retried with the same idempotency key finds it again."""
        if not isinstance(handle, str) or not re.fullmatch(CODE_UPLOAD_PATTERN, handle):
            raise UserError(f"code_upload {str(handle)[:80]!r} is not a code upload handle",
                            hint="send the folder to POST /v1/code and submit with the code_upload it answers")
        found = self._handles.get(handle)
        if found is None or found[2] <= self._clock():
            raise NotFound(f"code upload {handle} is not known on this box: it expired ({self._ttl / 60:.0f} "
                           "minutes), was made on another box, or the daemon restarted since",
                           code="code_upload_unknown", hint="run floyd run again: it sends the code again")
        tree, sender, _ = found
        if sender != person:
            who = f"user {person}" if person else "a caller with no account"
            raise Forbidden(f"{who} may not submit code upload {handle}: {sender or 'someone else'} sent it",
                            code="not_the_owner", hint="send your own code (floyd run does) and submit with its handle")
        return tree
