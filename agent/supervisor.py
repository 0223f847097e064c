"""The agent's main loop: one job, from spec.json to a final status.json.

    read spec ─► status starting ─► spawn job ─► status running ─► capture loop ─► status exited
                       │                                              │
                       └─ spec unreadable / stop file / no sandbox ───┴─► status exited

The capture loop waits (poll) on the job's stdout and stderr pipes, a pidfd of the
job and a wakeup pipe for signals. Bursts are read 64 KiB at a time and written to
``job.log`` in one write per burst; after a burst it naps a few milliseconds so a job
printing many short lines is read in few large gulps rather than one wakeup per line.

Termination: on SIGTERM/SIGINT (the daemon's ``floyd stop``; outcome and reason from
the ``stop`` file, :mod:`floydd.agent.stop`) or when ``max_runtime`` passes, every process
of the job gets SIGTERM and, ``stop_grace`` seconds later, SIGKILL. The agent is a child
subreaper, so processes the job leaves behind stay its descendants; when the job's main
process ends they are killed, and the job counts as over.

A flood: ``job.log`` stops growing at the spec's ``max_log_bytes`` (:mod:`floydd.agent.capture`:
later lines are dropped and counted, the last line of each metric kept); status.json says
when the cap was reached and, at the end, how much was dropped.

A full disk: when ``job.log`` cannot be written (or made) for lack of space the job is
ended the same way as ``failed``, "disk full at WORKSPACE/job.log" (what it prints meanwhile
is dropped). Every status is written in place when a new file cannot be made, in the room
status.json keeps (:mod:`floydd.agent.status`), so the agent always reports how the job
ended, even when the disk filled up before it wrote its first status.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from floydd.agent import jobuser, procs, sandbox
from floydd.agent.capture import LogWriter
from floydd.agent.spec import AgentSpec
from floydd.agent.status import Status, process_start_time, write_status
from floydd.agent.stop import keeps_log, read_stop
from floydd.errors import FloyddError

__all__ = ["Supervisor", "main", "outcome_of"]

log = logging.getLogger("floydd.agent")

READ_SIZE = 64 * 1024
READS_A_TURN = 16
"""Reads of a stream in one turn of the loop (1 MiB): a flood is written, and a stop heard,
a MiB at a time, not after all it could print meanwhile."""
NAP = 0.01
"""Pause after a burst so the job's many small writes pile up into one big read."""
DRAIN_LIMIT = 2.0
"""After the job ended, how long to wait for its pipes to close."""
WAIT_MAX = 60.0
"""Longest single wait for the job's output: poll(2) takes at most ~24 days in ms, and a
long --max-runtime must not overflow it (the loop simply waits again)."""
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def main(argv: list[str]) -> int:
    if argv == ["--spare"]:
        argv = _wait_for_a_job()
        if not argv:
            return 0
    if len(argv) != 1:
        print("usage: python -m floydd.agent WORKSPACE", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s agent[%(process)d] %(levelname)s %(message)s")
    return Supervisor(Path(argv[0])).run()


def _wait_for_a_job() -> list[str]:
    """A spare agent (:mod:`floydd.runtime.spare`), its imports done: wait for a workspace on
    stdin, then stand where ``python -m floydd.agent WORKSPACE`` starts: in the workspace, its
    output appended to ``agent.log``, stdin from /dev/null. ``[]`` when the daemon let it go
    (end of file) or sent nothing usable."""
    line = sys.stdin.buffer.readline()
    if not line.endswith(b"\n") or len(line) < 2:
        return []
    ws = os.fsdecode(line[:-1])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        os.chdir(ws)
        out = os.open("agent.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:      # a full disk: the agent still writes its status in the room kept for it
        out = os.open(os.devnull, os.O_WRONLY)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    return [ws]


def outcome_of(returncode: int, ending: tuple[str, str] | None) -> tuple[str, str, int, str | None]:
    """``(outcome, reason, exit_code, signal_name)`` for a job that ended with ``returncode``.

    ``ending`` is ``(outcome, reason)`` when the agent itself ended the job (stop or
    timeout); that outcome wins over how the process happened to exit. Exit codes
    128+N from a shell or bubblewrap read as "killed by signal N".
    """
    signame = None
    if returncode < 0:
        signame = _signame(-returncode)
        exit_code = 128 - returncode
    else:
        exit_code = returncode
        if 128 < returncode < 128 + signal.NSIG:
            signame = _signame(returncode - 128)
    if ending is not None:
        return ending[0], ending[1], exit_code, signame
    if returncode == 0:
        return "success", "exit code 0", 0, None
    if returncode < 0:
        return "failed", f"killed by {signame}", exit_code, signame
    if signame:
        return "failed", f"killed by {signame} (exit code {exit_code})", exit_code, signame
    return "failed", f"exit code {exit_code}", exit_code, None


class Supervisor:
    """Runs the job of one workspace; :meth:`run` returns when status.json says exited."""

    def __init__(self, ws: Path) -> None:
        self.ws = Path(ws).absolute()
        self.status = Status(agent_pid=os.getpid(), agent_start_time=process_start_time(os.getpid()) or 0.0)
        self._signalled = False
        self._ending: tuple[str, str] | None = None
        self._kill_at: float | None = None
        self._killed = False
        self._log_full = False
        self._stop_seen = False

    def run(self) -> int:
        wake_r = self._install_signals()
        write_status(self.ws, self.status)
        try:
            spec = AgentSpec.from_json((self.ws / "spec.json").read_bytes())
        except (OSError, FloyddError) as exc:
            return self._finish("failed", f"cannot read spec.json: {exc}")
        if self._signalled or (self.ws / "stop").exists():
            return self._finish(*self._stop_request())
        try:
            launch = sandbox.build_launch(spec, self.ws, sandbox.resolve_sandbox(spec.sandbox))
            if spec.uid is not None:
                jobuser.hand_over(self.ws, spec)
        except FloyddError as exc:
            return self._finish("failed", exc.message)
        log.info("job %s: %s (sandbox %s)", spec.job, spec.command, launch.sandbox)
        procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)
        try:
            log_fd = os.open(self.ws / "job.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            why = self._disk_full if exc.errno in _NO_SPACE else f"cannot open job.log: {exc}"
            return self._finish("failed", why)
        out_r, out_w = procs.pipe()
        err_r, err_w = procs.pipe()
        try:
            proc = subprocess.Popen(
                launch.argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, cwd=launch.cwd,
                env=launch.env, start_new_session=True, close_fds=True, preexec_fn=procs.die_with_agent)
        except OSError as exc:
            return self._finish("failed", f"could not start the job: {exc}")
        finally:
            os.close(out_w)
            os.close(err_w)
        self.status = self.status.evolve(state="running", job_pid=proc.pid, started=time.time(),
                                         sandbox=launch.sandbox)
        write_status(self.ws, self.status)
        writer = LogWriter(log_fd, spec.max_log_bytes)
        returncode = self._loop(spec, proc, writer, {out_r: b"o", err_r: b"e"}, wake_r)
        writer.flush_partial(time.time())
        writer.finish(time.time())
        if not self._write_log(writer) and self._ending is None:
            self._ending = ("failed", self._disk_full)
        self.status = self.status.evolve(log_dropped_lines=writer.dropped_lines,
                                         log_dropped_bytes=writer.dropped_bytes)
        try:
            os.fsync(log_fd)
        except OSError as exc:
            log.warning("could not flush job.log: %s", exc)
        os.close(log_fd)
        outcome, reason, exit_code, signame = outcome_of(returncode, self._ending)
        return self._finish(outcome, reason, exit_code=exit_code, signal=signame)

    # -- the capture loop ------------------------------------------------------------------

    def _loop(self, spec: AgentSpec, proc: subprocess.Popen, writer: LogWriter,
              streams: dict[int, bytes], wake_r: int) -> int:
        # poll(2), not epoll: epoll stays hooked on the pipes between waits and runs a
        # callback on every write the job makes; poll is hooked only while we wait
        sel = selectors.PollSelector()
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        try:
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            pidfd = None
        deadline = time.monotonic() + spec.max_runtime if spec.max_runtime else None
        returncode: int | None = None
        drain_until = None
        while streams or returncode is None:
            now = time.monotonic()
            timeouts = [t for t in (deadline if self._ending is None else None,
                                    None if self._killed else self._kill_at, drain_until) if t is not None]
            if pidfd is None and returncode is None:
                timeouts.append(now + 0.05)
            timeout = min(WAIT_MAX, max(0.0, min(timeouts) - now)) if timeouts else None
            got = 0
            for key, _ in sel.select(timeout):
                fd = key.fd
                if fd in streams:
                    got += self._read(fd, streams, writer, sel)
                elif fd == wake_r:
                    procs.drain_fd(wake_r)
                elif fd == pidfd:
                    sel.unregister(pidfd)
            if self._signalled and not self._stop_seen:
                self._stop_seen = True
                if not keeps_log(self.ws):      # a stop for the daemon's full disk: not one line more
                    self._log_full = True
            if not self._write_log(writer) and returncode is None and self._ending is None:
                self._terminate(spec, proc, self._stop_request() if self._signalled else ("failed", self._disk_full))
            if writer.capped and self.status.log_capped is None:   # said once, for the daemon's events
                self.status = self.status.evolve(log_capped=time.time())
                write_status(self.ws, self.status)
            now = time.monotonic()
            if returncode is None and self._ending is None:
                if self._signalled:
                    self._terminate(spec, proc, self._stop_request())
                elif deadline is not None and now >= deadline:
                    self._terminate(spec, proc, ("timeout", f"exceeded --max-runtime {spec.max_runtime:g}s"))
            if self._kill_at is not None and not self._killed and now >= self._kill_at and returncode is None:
                log.info("job still running %gs after SIGTERM; sending SIGKILL", spec.stop_grace)
                self._signal_job(proc, signal.SIGKILL, sandboxed=False)
                self._killed = True
            if returncode is None and procs.exited(proc, pidfd, sel):
                # the main process is over: whatever it left behind goes too, then reap
                self._kill_leftovers(proc)
                returncode = proc.wait()
                drain_until = time.monotonic() + DRAIN_LIMIT
                log.info("job process %d ended with %d", proc.pid, returncode)
            if drain_until is not None and time.monotonic() >= drain_until and streams:
                log.warning("job output still open %gs after it ended; closing it", DRAIN_LIMIT)
                for fd in list(streams):
                    self._close_stream(fd, streams, sel)
            if got and returncode is None:
                time.sleep(NAP)
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        procs.reap_orphans()
        return returncode

    def _read(self, fd: int, streams: dict[int, bytes], writer: LogWriter, sel: selectors.BaseSelector) -> int:
        total = 0
        ts = time.time()
        for _ in range(READS_A_TURN):
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return total
            if not data:
                self._close_stream(fd, streams, sel)
                return total
            writer.add(streams[fd], data, ts)
            total += len(data)
            if len(data) < READ_SIZE:
                return total
        return total

    @staticmethod
    def _close_stream(fd: int, streams: dict[int, bytes], sel: selectors.BaseSelector) -> None:
        sel.unregister(fd)
        os.close(fd)
        del streams[fd]

    # -- ending the job ----------------------------------------------------------------------

    def _terminate(self, spec: AgentSpec, proc: subprocess.Popen, ending: tuple[str, str]) -> None:
        self._ending = ending
        log.info("ending the job (%s: %s): SIGTERM, SIGKILL after %gs", *ending, spec.stop_grace)
        self._kill_at = time.monotonic() + spec.stop_grace
        self._signal_job(proc, signal.SIGTERM, sandboxed=self.status.sandbox == "bwrap")

    def _signal_job(self, proc: subprocess.Popen, sig: int, *, sandboxed: bool) -> None:
        """Send ``sig`` to every process of the job.

        Under bubblewrap the bwrap processes themselves are spared a SIGTERM: killing
        them would SIGKILL the sandbox at once (``--die-with-parent``) and the job
        would get no chance to save a checkpoint.
        """
        if not sandboxed:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        import psutil
        for child in procs.descendants():
            try:
                if sandboxed and child.name() == "bwrap":
                    continue
                child.send_signal(sig)
            except psutil.Error:
                pass

    def _kill_leftovers(self, proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the leader is unreaped: its group id is still ours
        except (ProcessLookupError, PermissionError):
            pass
        import psutil
        for child in procs.descendants():
            if child.pid != proc.pid:
                try:
                    child.kill()
                except psutil.Error:
                    pass

    def _write_log(self, writer: LogWriter) -> bool:
        """Append what was read to job.log; False (and it is dropped) when the disk is full.
        After a first failure nothing more is written: what the daemon frees to record
        the job's end is not for its last lines."""
        try:
            if not self._log_full:
                writer.write()
                return True
        except OSError as exc:
            if exc.errno not in _NO_SPACE:
                raise
            log.warning("job.log cannot be written: %s", exc)
            self._log_full = True
        writer.drop()
        return False

    @property
    def _disk_full(self) -> str:
        return f"disk full at {self.ws / 'job.log'}"

    def _stop_request(self) -> tuple[str, str]:
        """``(outcome, reason)`` the daemon asked for (a stop without a file: stopped)."""
        return read_stop(self.ws) or ("stopped", "stopped")

    def _finish(self, outcome: str, reason: str, **fields) -> int:
        self.status = self.status.evolve(state="exited", ended=time.time(), outcome=outcome, reason=reason,
                                         **fields)
        write_status(self.ws, self.status)
        log.info("job over: %s (%s)", outcome, reason)
        return 0

    def _install_signals(self) -> int:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

        def on_stop(signum, frame) -> None:
            self._signalled = True
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        return wake_r


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
