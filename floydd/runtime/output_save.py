"""Saving a job's /output when it has exited: the dataset version ``PROJECT/N/output``.

:class:`OutputSaver` is the part of a :class:`~floydd.runtime.watch.JobWatch` that owns this
exited step. An empty /output makes no version (the record's ``output_version`` is ``""``,
"saved nothing"); an entry a snapshot cannot hold is skipped and named in the job's log and
events (:mod:`.outputs`), the rest is saved; /output that cannot be stored for lack of space
fails the job (through ``fail``), its files staying in the workspace.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.errors import FloyddError
from floydd.runtime import outputs
from floydd.runtime.disk import Disk, no_space

__all__ = ["OutputSaver"]

MAX_NAMED = 20
"""The most skipped /output entries named one by one (in the job's log and its events)."""


class OutputSaver:
    """Saves one job's /output as a dataset version, once its process has exited."""

    def __init__(self, *, project: str, number: int, ws: Path, records, store, disk: Disk,
                 event: Callable[..., None], note: Callable[..., None], fail: Callable[[str], None]) -> None:
        self.project, self.number, self.ws = project, number, Path(ws)
        self.key = f"{project}/{number}"
        self._records, self._store, self._disk = records, store, disk
        self._event, self._note, self._fail = event, note, fail

    def save(self) -> None:
        output = self.ws / "output"
        if not output.is_dir() and not output.is_symlink():
            return
        fd = outputs.open_output(output)   # all that follows goes through this descriptor
        if fd is None:                     # a link: not followed, nothing saved, said why
            self._name_skipped(outputs.screen(output).skipped)
            return
        try:
            self._save_output_from(output, fd)
        finally:
            os.close(fd)

    def _save_output_from(self, output: Path, fd: int) -> None:
        name = f"{self.project}/{self.number}/output"
        if self._disk.check() and not outputs.empty(output, outputs.Screened(), dir_fd=fd):
            self._output_not_saved(self._disk.why())       # a snapshot would only eat the reserve
            return
        screened = outputs.screen(output, dir_fd=fd)
        self._name_skipped(screened.skipped)
        if screened.everything:
            return
        if outputs.empty(output, screened, dir_fd=fd):   # nothing to keep: no dataset version, no raft entry
            self._records.update_job(self.project, self.number, output_version="")
            self._event("output", "/output is empty: nothing saved")
            return
        try:
            tree = self._store.snapshot(output, ignore=screened.ignore, dir_fd=fd)
            version = self._store.catalog.add_version(name, tree, message=f"output of {self.key}")
        except Exception as exc:  # the job's result stands; say what happened to its output
            if no_space(exc):
                self._disk.check()
                self._output_not_saved(self._disk.why(self._store.root))
            elif isinstance(exc, FloyddError):   # e.g. a folder swapped for a link while being saved
                log.runtime.warning("job %s: saving /output failed: %s", self.key, exc)
                self._event("output", f"saving /output failed: {exc}")
            else:
                log.runtime.exception("job %s: saving /output failed", self.key)
                self._event("output", f"saving /output failed: {exc}")
            return
        self._records.update_job(self.project, self.number, output_version=version.ref)
        skipped = f" ({len(screened.skipped)} entries skipped)" if screened.skipped else ""
        self._event("output", f"/output saved as {version.ref}{skipped}", {"tree": str(tree)})

    def _output_not_saved(self, why: str) -> None:
        """/output could not be stored for lack of space: the job fails, its files stay in the
        workspace until the job is deleted."""
        self._fail(f"{why}: /output was not saved")
        self._event("output", f"/output was not saved: {why}")
        self._note(f"floydd: /output was not saved: {why}")

    def _name_skipped(self, skipped: list[outputs.Skipped]) -> None:
        """Say, in the job's log and events, which entries of /output are not saved and why."""
        if not skipped:
            return
        lines = []
        for item in skipped[:MAX_NAMED]:
            where = f"/output/{item.path}" if item.path else "/output"
            lines.append(f"floydd: {where} is not saved: {item.why}")
            self._event("output", f"{where} is not saved: {item.why}", {"path": item.path, "why": item.why})
        if len(skipped) > MAX_NAMED:
            more = f"floydd: and {len(skipped) - MAX_NAMED} more entries of /output are not saved"
            lines.append(more)
            self._event("output", more.removeprefix("floydd: "), {"more": len(skipped) - MAX_NAMED})
        log.runtime.warning("job %s: %d entries of /output skipped, e.g. %s", self.key, len(skipped), lines[0])
        self._note(*lines)
