"""``status.json``: what an agent reports about itself and its job.

The agent rewrites the whole file atomically (temp file + rename) at each change, so
a reader sees either the previous or the next status, never a torn one::

    starting ──(job spawned)──► running ──(job ended)──► exited
        └──────────(spec unreadable, stopped before start, spawn failed)──┘

``outcome`` (only when exited) is one of success | failed | stopped | timeout, and
``reason`` says why in a human sentence ("exit code 1", "killed by SIGKILL",
"stopped by user", "exceeded --max-runtime 5s").
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

__all__ = ["Status", "STATES", "OUTCOMES", "read_status", "write_status", "atomic_write", "process_start_time"]

STATES = ("starting", "running", "exited")
OUTCOMES = ("success", "failed", "stopped", "timeout")


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


def read_status(workspace: Path) -> Status | None:
    """The agent's last status, or None when it has not written one (yet)."""
    try:
        return Status.from_json((Path(workspace) / "status.json").read_bytes())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):  # only a hand-edited file can be torn or foreign
        return None


def write_status(workspace: Path, status: Status) -> None:
    """Replace status.json; the final (exited) status is also flushed to disk.

    On a full disk, where not even a small new file can be made, the status is written
    over the old one in place (its blocks are already allocated), padded with spaces to
    the old length so a reader sees the old or the new JSON, never a mix of two lengths.
    """
    path = Path(workspace) / "status.json"
    data = status.to_json().encode()
    try:
        atomic_write(path, data, durable=status.exited)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not _overwrite(path, data, durable=status.exited):
            raise


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


def _overwrite(path: Path, data: bytes, *, durable: bool) -> bool:
    """Write ``data`` over ``path`` in place; False when there is no such file."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        os.pwrite(fd, data.ljust(size, b" "), 0)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    return True


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
