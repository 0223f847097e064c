"""Starting, recognising and stopping a job's agent process.

The agent runs as ``python -m floydd.agent WORKSPACE`` in a session of its own, stdin
from /dev/null and its own output into ``WORKSPACE/agent.log``, so it survives the
daemon (even ``kill -9``). It is known by ``(pid, start time)`` from status.json: a pid
alone could by now belong to another process. Before it starts, the daemon makes room for
that status.json (:func:`floydd.agent.status.make_room`): an agent whose disk fills up while
it starts still says how its job ended, never vanishes without a word.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.agent.jobenv import agent_env
from floydd.agent.spec import AgentSpec
from floydd.agent.status import Status, atomic_write, make_room, process_start_time, read_status
from floydd.agent.stop import write_stop
from floydd.runtime.disk import no_space
from floydd.runtime.spare import Spares

__all__ = ["AgentHandle", "start_agent", "write_spec", "alive", "request_stop", "kill_orphans"]


@dataclass(frozen=True, slots=True)
class AgentHandle:
    pid: int
    start_time: float | None
    process: subprocess.Popen | None = None
    """Set for agents this daemon started: polling it reaps the agent once it exits."""


def write_spec(ws: Path, spec: AgentSpec) -> None:
    atomic_write(Path(ws) / "spec.json", spec.to_json().encode())


def start_agent(ws: Path, spec: AgentSpec, *, python: str = sys.executable,
                env_pass: tuple[str, ...] = (), spares: Spares | None = None) -> AgentHandle:
    """Write spec.json and start the agent detached; returns at once (blocking: use a thread).

    The agent starts with the allow-listed environment (:func:`floydd.agent.jobenv.agent_env`),
    not the daemon's: what it does not hold, no job can inherit. ``env_pass``: the site's
    extra names (``job_env_pass``). ``spares``: the spare agent (:mod:`.spare`, started the same
    way) becomes this one when there is a live one. Raises OSError where the spec or the room
    for the agent's status cannot be written (a full disk: the job is not started)."""
    ws = Path(ws)
    write_spec(ws, spec)
    make_room(ws)
    spare = spares.take(ws) if spares is not None else None
    if spare is not None:
        log.runtime.debug("spare agent %d took %s", spare.pid, spec.job)
        return AgentHandle(spare.pid, process_start_time(spare.pid), spare)
    with open(ws / "agent.log", "ab") as out:
        proc = subprocess.Popen([python, "-m", "floydd.agent", str(ws)], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, cwd=ws, start_new_session=True,
                                close_fds=True, env=agent_env(os.environ, env_pass))
    log.runtime.debug("started agent %d for %s", proc.pid, spec.job)
    return AgentHandle(proc.pid, process_start_time(proc.pid), proc)


def alive(status: Status | None) -> bool:
    """Whether the agent that wrote ``status`` still runs (not a zombie, not a reused pid)."""
    if status is None:
        return False
    try:
        with open(f"/proc/{status.agent_pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:][:1]
    if state in (b"Z", b"X"):
        return False
    return process_start_time(status.agent_pid) == status.agent_start_time


def request_stop(ws: Path, reason: str, outcome: str = "stopped", *, keep_log: bool = True,
                 make_room: Callable[[], object] | None = None) -> bool:
    """Ask the job's agent to end it as ``outcome`` (stopped, or failed): write ``ws/stop``
    (:mod:`floydd.agent.stop`), then SIGTERM the agent.

    Returns whether an agent was signalled. An agent that has not yet written its
    status finds the stop file when it starts and does not run the job at all.
    A workspace that does not exist yet (still being prepared) is left alone.

    A stop for a full disk (``keep_log=False``) tells the agent to write nothing more to its
    log: the caller releases the disk's reserve only after this, so the space freed for
    recording the job's end is not taken by its last lines first. A stop file that finds no
    room even for itself is written again after ``make_room()`` (which releases the reserve);
    where it still cannot be, the agent is signalled all the same (it ends the job as
    stopped; the daemon records the failure it asked for).
    """
    ws = Path(ws)
    if not ws.is_dir():
        return False
    for attempt in (1, 2):
        try:
            write_stop(ws, reason, outcome, keep_log=keep_log)
            break
        except OSError as exc:
            if attempt == 1 and make_room is not None and no_space(exc):
                make_room()
                continue
            log.runtime.warning("cannot write %s: %s; signalling its agent all the same", ws / "stop", exc)
            break
    status = read_status(ws)
    if status is None or status.exited or not alive(status):
        return False
    try:
        os.kill(status.agent_pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def kill_orphans(status: Status | None, job: str) -> int:
    """After an agent vanished: SIGKILL what is left of its job; returns how many processes.

    Under bubblewrap the sandbox died with the agent. Without it, processes the job
    started may survive (only its first process dies with the agent). They are found
    by the job's process group and confirmed by ``FLOYD_JOB`` in their environment,
    so a process group id reused by someone else is left alone.
    """
    if status is None or not status.job_pid:
        return 0
    import psutil
    killed = 0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != status.job_pid or proc.environ().get("FLOYD_JOB") != job:
                continue
            proc.kill()
            killed += 1
        except (OSError, psutil.Error):
            continue
    return killed
