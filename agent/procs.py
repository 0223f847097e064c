"""The job's processes as the OS sees them, for the agent's :class:`~floydd.agent.supervisor.Supervisor`.

The pipes its output comes through (large, non-blocking), whether its main process has ended
(without reaping it), what it left behind (the agent is a child subreaper: its descendants,
reaped here), and ``prctl``: the agent as subreaper, the job dying with the agent.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import selectors
import signal
import subprocess

__all__ = ["PR_SET_CHILD_SUBREAPER", "descendants", "die_with_agent", "drain_fd", "exited", "pipe", "prctl",
           "reap_orphans"]

PIPE_SIZE = 1024 * 1024
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def exited(proc: subprocess.Popen, pidfd: int | None, sel: selectors.BaseSelector) -> bool:
    """Whether the job's main process has ended, without reaping it (its group id stays ours)."""
    if pidfd is not None:
        try:
            sel.get_key(pidfd)
            return False  # still registered: not readable yet
        except KeyError:
            return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def descendants() -> list:
    """Every process below the agent (psutil is imported only when a job is ended)."""
    import psutil
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def reap_orphans() -> None:
    """Reap processes the job left behind (they were re-parented to us, the subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def pipe() -> tuple[int, int]:
    r, w = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(r, False)
    for size in (PIPE_SIZE, 256 * 1024):
        try:
            fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, size)
            break
        except (OSError, AttributeError):
            continue
    return r, w


def drain_fd(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


_libc: ctypes.CDLL | None = None


def prctl(option: int, value: int) -> None:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_agent_pid = os.getpid()


def die_with_agent() -> None:
    """In the child (between fork and exec): die when the agent dies.

    Without a sandbox this is the job's --die-with-parent. Under bubblewrap it closes
    the window before bwrap sets its own: an agent killed in that moment would
    otherwise leave the sandbox running. If the agent is already gone, give up.
    """
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != _agent_pid:  # the agent is the process that imported this module
        os._exit(137)
