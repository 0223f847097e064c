"""Checkpoints: a running job's ``/output``, saved now and then so a rerun can start from it.

A box can die for good with a job half done; its workspace dies with it. So while a job
runs, the reconciler asks every ``checkpoint_interval`` for a snapshot of its ``/output``
(:func:`save`): stored in this box's store (unchanged files cost a metadata look, thanks to
the store's file cache), published in the cluster catalog as the next version of
``PROJECT/N/output`` and copied to a second box like any dataset version. A rerun of the
job (its restart policy, :class:`floydd.model.RestartPolicy`) mounts the last one as its
``/output``, read-write (:func:`floydd.runtime.workspace.prepare`).

The convention for jobs: write checkpoints into ``/output`` atomically (a temporary name,
then a rename: a snapshot taken meanwhile sees the old file or the new one, never half of
one), and look there first at start. What a snapshot cannot hold (a FIFO, a link leaving
``/output``) is skipped, as at the end of the job (:mod:`.outputs`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from floydd.runtime import outputs

__all__ = ["Checkpoint", "save"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    tree: str
    size: int
    files: int


def save(output: Path, store, previous: str | None = None) -> Checkpoint | None:
    """Snapshot ``output`` into ``store`` (blocking: a thread); None when it is empty, not a
    folder, or unchanged since the checkpoint whose tree is ``previous``.

    The job runs meanwhile and may swap its folders for links: /output is opened once (not
    followed if it is a link) and screened and stored through that descriptor only."""
    output = Path(output)
    fd = outputs.open_output(output)
    if fd is None:
        return None
    try:
        with os.scandir(fd) as entries:
            if not any(True for _ in entries):
                return None
        screened = outputs.screen(output, dir_fd=fd)
        if screened.everything:
            return None
        result = store.snapshot_report(output, ignore=screened.ignore, dir_fd=fd)
    finally:
        os.close(fd)
    if str(result.tree) == previous:
        return None
    return Checkpoint(str(result.tree), int(result.size), int(result.files))
