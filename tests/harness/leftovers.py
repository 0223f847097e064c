"""No test leaves a process behind: the check at the end of each test process's session.

What counts as the run's own: this test process (an xdist worker, or pytest itself with
``-n0``) and everything below it; every process whose environment carries this process's
:data:`TAG` (each test process draws its own, so one worker never flags another's
daemons); every process whose working folder or command line names a folder of this
session (pytest's base temp, and the folders fixtures :func:`watch` outside it, such as the
runtime's state folders under /var/tmp); and everything below those. A job's agent starts
with an allow-listed environment and in a session of its own, so it is found by its
workspace (its working folder); a sandbox by the workspace its command line binds.

Of those, a *leftover* is a floydd process (the daemon, a dev node, an agent, the CLI), a
bubblewrap sandbox, or anything below one of them (the job itself), still running when the
session ends. A few seconds are allowed for stops already on their way; then the run fails
(an error at the teardown of the last test), naming each, and they are killed so the
machine stays clean.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import psutil

__all__ = ["TAG_NAME", "TAG", "watch", "leftovers", "started_in", "describe", "kill"]

TAG_NAME = "TESTS_RUN_TAG"
"""Not a ``FLOYD*`` name: fixtures that start daemons with a cleaned environment drop those."""

TAG = uuid.uuid4().hex
os.environ[TAG_NAME] = TAG      # every child of this process inherits it (overwrites a parent worker's)

_watched: set[str] = set()


def watch(folder: Path | str) -> Path:
    """Count processes working in (or naming) ``folder`` as this session's; returns it."""
    _watched.add(str(Path(folder).absolute()).rstrip("/"))
    return Path(folder)


def _names_watched(text: str, folders: set[str]) -> bool:
    return any(text == f or f + "/" in text or text.startswith(f + "/") for f in folders)


def _is_kind(proc: psutil.Process) -> bool:
    cmd = proc.cmdline()
    return bool(cmd) and (os.path.basename(cmd[0]) == "bwrap" or any("floydd" in part for part in cmd[:4]))


def _processes() -> tuple[dict[int, psutil.Process], dict[int, int]]:
    """Every running process but this one and zombies, and each one's parent."""
    me = os.getpid()
    procs: dict[int, psutil.Process] = {}
    parent: dict[int, int] = {}
    for proc in psutil.process_iter():
        try:
            if proc.pid != me and proc.status() != psutil.STATUS_ZOMBIE:
                procs[proc.pid], parent[proc.pid] = proc, proc.ppid()
        except psutil.Error:
            continue
    return procs, parent


def _below(pid: int, tops: set[int], parent: dict[int, int]) -> bool:
    seen = set()
    while pid and pid not in seen:
        if pid in tops:
            return True
        seen.add(pid)
        pid = parent.get(pid, 0)
    return False


def _in_folders(proc: psutil.Process, folders: set[str]) -> bool:
    try:
        cwd = proc.cwd()
    except (psutil.AccessDenied, OSError):
        cwd = ""
    return _names_watched(cwd, folders) or any(_names_watched(a, folders) for a in proc.cmdline())


def started_in(folder: Path | str) -> list[psutil.Process]:
    """Every process working in or naming ``folder`` (a job's agent, its sandbox), and what
    runs below them: for a fixture to kill what its test left."""
    folders = {str(Path(folder).absolute()).rstrip("/")}
    procs, parent = _processes()
    roots = set()
    for pid, proc in procs.items():
        try:
            if _in_folders(proc, folders):
                roots.add(pid)
        except psutil.Error:
            continue
    return [procs[pid] for pid in sorted(procs) if _below(pid, roots, parent)]


def leftovers() -> list[psutil.Process]:
    """The run's floydd, agent and sandbox processes (and what runs below them) still running."""
    procs, parent = _processes()
    roots: set[int] = {os.getpid()}
    for pid, proc in procs.items():
        try:
            if _env(proc).get(TAG_NAME) == TAG or (_watched and _in_folders(proc, _watched)):
                roots.add(pid)
        except psutil.Error:
            continue
    ours = {pid for pid in procs if _below(pid, roots, parent)}
    kinds = set()
    for pid in ours:
        try:
            if _is_kind(procs[pid]):
                kinds.add(pid)
        except psutil.Error:
            continue
    return [procs[pid] for pid in sorted(ours) if _below(pid, kinds, parent)]


def _env(proc: psutil.Process) -> dict:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def describe(procs: list[psutil.Process]) -> str:
    lines = []
    for proc in procs:
        try:
            lines.append(f"  pid {proc.pid} (parent {proc.ppid()}, group {os.getpgid(proc.pid)}, cwd {proc.cwd()}, "
                         f"FLOYD_JOB={_env(proc).get('FLOYD_JOB')}): {' '.join(proc.cmdline())[:300]}")
        except (psutil.Error, OSError):
            lines.append(f"  pid {proc.pid} (gone while being named)")
    return "\n".join(lines)


def kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass

