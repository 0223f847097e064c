"""``status.json``: what an agent reports about itself and its job.

The agent rewrites the whole file atomically (temp file + rename) at each change, so
a reader sees either the previous or the next status, never a torn one::

    starting ──(job spawned)──► running ──(job ended)──► exited
        └──────────(spec unreadable, stopped before start, spawn failed)──┘

``outcome`` (only when exited) is one of success | failed | stopped | timeout, and
``reason`` says why in a human sentence ("exit code 1", "killed by SIGKILL",
"stopped by user", "exceeded --max-runtime 5s").

A full disk must not silence the agent: status.json is never shorter than
:data:`STATUS_ROOM` (the JSON, padded with spaces), so where no new file can be made
every later status, the final one included, is written over it in place, in blocks it
already holds (a reader may catch such a write half done, and reads again). The daemon makes that room before it starts the agent
(:func:`make_room`: a blank file, read as no status yet), so even an agent whose disk
fills up while it starts can say how the job ended.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from floydd.model import RUN_OUTCOMES

__all__ = ["Status", "STATES", "OUTCOMES", "STATUS_ROOM", "read_status", "write_status", "make_room",
           "atomic_write", "process_start_time"]

STATES = ("starting", "running", "exited")
OUTCOMES = RUN_OUTCOMES
"""How a run ended, as the agent says it (the model's :data:`~floydd.model.RUN_OUTCOMES`)."""
STATUS_ROOM = 4096
"""Bytes status.json always takes (one block): room for any status written in place."""
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    agent_pid: int
    agent_start_time: float
    """:func:`process_start_time` of the agent: tells it from a later process reusing its pid."""
    state: str = "starting"
    job_pid: int | None = None
    sandbox: str | None = None
    """The sandbox actually used: "bwrap" or "none"."""
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    outcome: str | None = None
    reason: str = ""
    log_capped: float | None = None
    """When ``job.log`` reached its cap (``max_log_mb``); None: it has not."""
    log_dropped_lines: int = 0
    log_dropped_bytes: int = 0
    """What the job printed past the cap (counted; set with the final status)."""

    @property
    def exited(self) -> bool:
        return self.state == "exited"

    def evolve(self, **changes) -> Status:
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Status:
        raw = json.loads(text)
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)


_TORN_READS = 20
"""How often a status.json that does not parse is read again before it counts as no status."""


def read_status(workspace: Path) -> Status | None:
    """The agent's last status, or None when it has not written one (yet).

    A status written in place on a full disk can be read half-written (a read and a write of
    the same page may interleave): such a read is tried again, a millisecond apart, so one
    unlucky read never makes a live agent look as if it had never reported. Only a file that
    stays unreadable (edited by hand, or foreign) counts as no status."""
    path = Path(workspace) / "status.json"
    for attempt in range(_TORN_READS):
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if not raw.strip():  # the room the daemon made: the agent has not written yet
            return None
        try:
            return Status.from_json(raw)
        except (ValueError, TypeError):
            if attempt < _TORN_READS - 1:
                time.sleep(0.001)
    return None


def write_status(workspace: Path, status: Status) -> None:
    """Replace status.json; the final (exited) status is also flushed to disk.

    On a full disk, where not even a small new file can be made, the status is written
    over the old one in place (its blocks are already allocated), padded with spaces to
    the old length (never two lengths: a reader that meets a half-written one reads again,
    :func:`read_status`); a reason too long for that room is cut (with "…"). Raises OSError when there is no
    old file to write over (the daemon makes one: :func:`make_room`).
    """
    path = Path(workspace) / "status.json"
    try:
        atomic_write(path, status.to_json().encode().ljust(STATUS_ROOM, b" "), durable=status.exited)
    except OSError as exc:
        if exc.errno not in _NO_SPACE or not _overwrite(path, status, durable=status.exited):
            raise


def make_room(workspace: Path) -> None:
    """Before the agent starts: a blank status.json of :data:`STATUS_ROOM` bytes (read as
    no status yet), so the agent's statuses fit in place should the disk fill up before it
    writes its first. A status.json already there is left as it is (an agent may have
    written it). Raises OSError when even this cannot be written (the disk is full)."""
    path = Path(workspace) / "status.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.room")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(b" " * STATUS_ROOM)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # never over a status.json: link(2) does not replace
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def atomic_write(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new content, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _overwrite(path: Path, status: Status, *, durable: bool) -> bool:
    """Write ``status`` over ``path`` in place, within its size; False when there is no such file."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        os.pwrite(fd, _fitting(status, size).ljust(size, b" "), 0)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _fitting(status: Status, size: int) -> bytes:
    """``status`` as JSON of at most ``size`` bytes where cutting its reason can make it so."""
    data = status.to_json().encode()
    reason = status.reason
    while len(data) > size and reason:
        reason = reason[:max(0, len(reason) - (len(data) - size) - 1)]  # a character is at least a byte
        data = status.evolve(reason=reason + "…").to_json().encode()
    return data


_boot_time: float | None = None


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (unix time, clock-tick precision), None if there is none.

    Read from /proc the same way by the agent and by the daemon, so the two agree
    exactly; a pid reused by another process has another start time.
    """
    global _boot_time
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        if _boot_time is None:
            with open("/proc/stat", "rb") as f:
                _boot_time = next(float(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError):
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return round(_boot_time + int(fields[19]) / os.sysconf("SC_CLK_TCK"), 2)
