"""Snapshot a project's code folder into the store, honouring ``.floydignore``.

A code folder is for code: above the configured size the snapshot is refused
with a hint to move the data into ``floyd data`` (or ``.floydignore``), before
anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from floydd.errors import UserError
from floydd.store.ignore import IgnoreRules

__all__ = ["snapshot_code", "code_size"]


def code_size(folder: Path, rules: IgnoreRules, limit: int) -> int:
    """Bytes the snapshot would hold; stops counting once past ``limit``."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        dirnames[:] = [d for d in dirnames if not rules(prefix + d, True)]
        for name in filenames:
            if rules(prefix + name, False):
                continue
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            total += st.st_size
            if total > limit:
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
