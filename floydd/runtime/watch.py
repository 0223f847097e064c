"""Watching one running job: its log into the records, its samples, its end.

One :class:`JobWatch` per running job, driven by :class:`~floydd.runtime.runner.NodeRuntime`
(which owns the task). Each tick, in one worker thread: read the new complete lines
of job.log, record their metric points together with the new log offset (one
transaction, so a restarted daemon resumes exactly there), read status.json and check
the agent is alive. Between ticks it waits ``tail_interval`` or less: a pidfd of the
agent wakes it the moment the agent exits. Every ``sample_interval`` it records a
system sample of the job's process tree.

When the agent says the job exited (or vanished without saying so: ``lost``) the
watch runs the exited steps, each idempotent so a daemon killed half-way redoes them:
drain the log → save /output as dataset ``PROJECT/N/output`` → drop the input copies →
final state (the runtime then releases the GPUs and calls on_finished).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.agent.status import Status, read_status
from floydd.errors import FloyddError
from floydd.runtime import spawn, tail, workspace

__all__ = ["JobWatch", "Outcome"]

RECORDER_NICE = 10
"""Niceness of the thread that parses job logs into the records. Recording may lag a
running job by a moment; it must not slow the job (jobs run at the daemon's priority)."""


def _lower_priority() -> None:
    try:  # on Linux each thread has its own nice value
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), RECORDER_NICE)
    except OSError:
        pass


_recorder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floydd-recorder", initializer=_lower_priority)


async def _record(fn, *args):
    """Run log tailing/recording work on the low-priority recorder thread."""
    return await asyncio.get_running_loop().run_in_executor(_recorder, fn, *args)

@dataclass(frozen=True, slots=True)
class Outcome:
    state: str
    reason: str
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None


class JobWatch:
    """Follows one job's workspace until the job is over and recorded."""

    def __init__(self, *, project: str, number: int, ws: Path, records, store,
                 sample_interval: float, tail_interval: float,
                 sampler: Callable[[int], dict | None], forget: Callable[[int], None] | None = None,
                 process=None) -> None:
        self.project, self.number, self.ws = project, number, Path(ws)
        self.key = f"{project}/{number}"
        self._records, self._store = records, store
        self._sample_interval, self._tail_interval = sample_interval, tail_interval
        self._sampler, self._forget = sampler, forget
        self._sampled: set[int] = set()
        self._process = process  # Popen of an agent this daemon started (to reap it)
        self._offset = 0

    async def run(self) -> Outcome:
        """Watch until the job ended; then record it. Returns the final outcome."""
        self._offset = await asyncio.to_thread(self._records.get_log_offset, self.project, self.number)
        exited = asyncio.Event()
        pidfd = await asyncio.to_thread(self._open_pidfd)
        loop = asyncio.get_running_loop()
        if pidfd is not None:
            loop.add_reader(pidfd, exited.set)
        try:
            outcome = await self._follow(exited)
        finally:
            if pidfd is not None:
                loop.remove_reader(pidfd)
                os.close(pidfd)
            if self._forget is not None:
                for pid in self._sampled:
                    self._forget(pid)
        await self._exited_steps(outcome)
        return outcome

    async def _follow(self, exited: asyncio.Event) -> Outcome:
        next_sample = time.monotonic() + min(1.0, self._sample_interval)
        while True:
            status, is_alive, more = await _record(self._tick)
            if status is not None and status.exited:
                return _outcome_of(status)
            if not is_alive:
                status = await asyncio.to_thread(read_status, self.ws)  # it may have just finished
                if status is not None and status.exited:
                    return _outcome_of(status)
                return await asyncio.to_thread(self._lost, status)
            if time.monotonic() >= next_sample and status is not None and status.job_pid:
                next_sample = time.monotonic() + self._sample_interval
                await asyncio.to_thread(self._sample, status.job_pid)
            if more:
                continue
            exited.clear()
            try:
                await asyncio.wait_for(exited.wait(), self._tail_interval)
            except asyncio.TimeoutError:
                pass

    # -- in worker threads ---------------------------------------------------------------

    def _tick(self) -> tuple[Status | None, bool, bool]:
        more = self._tail_once()
        status = read_status(self.ws)
        if self._process is not None:
            # our own child: alive until reaped (which this poll does once it exited),
            # also before it has written its first status
            return status, self._process.poll() is None, more
        return status, spawn.alive(status), more

    def _tail_once(self) -> bool:
        """Record the new complete lines' metrics; True when a full chunk was read (more waits)."""
        chunk = tail.read_chunk(self.ws / "job.log", self._offset)
        if chunk.offset == self._offset:
            return False
        points = chunk.metrics  # MetricPoint is the (name, value, step, ts) row add_metrics takes
        try:
            self._records.add_metrics(self.project, self.number, points, log_offset=chunk.offset)
        except FloyddError as exc:  # a batch the records refuse must not stall the log
            log.runtime.warning("job %s: metrics at log offset %d not recorded: %s", self.key, self._offset, exc)
            self._records.set_log_offset(self.project, self.number, chunk.offset)
        self._offset = chunk.offset
        return len(chunk.data) >= tail.CHUNK_BYTES // 2

    def _sample(self, pid: int) -> None:
        self._sampled.add(pid)
        try:
            sample = self._sampler(pid)
        except Exception:  # a sampler bug must not end the watch
            log.runtime.exception("job %s: sampling pid %d failed", self.key, pid)
            return
        if sample:
            sample.setdefault("ts", time.time())
            self._records.add_system_samples(self.project, self.number, [sample])

    def _open_pidfd(self) -> int | None:
        """A pidfd of the agent (readable once it exits), or None (then ticks poll)."""
        if self._process is not None:  # our unreaped child: its pid cannot be reused
            pid = self._process.pid if self._process.returncode is None else None
            status = None
        else:
            status = read_status(self.ws)
            pid = status.agent_pid if status is not None and not status.exited else None
        if pid is None:
            return None
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return None
        if status is not None and not spawn.alive(status):  # the pid was reused before we opened it
            os.close(fd)
            return None
        return fd

    def _lost(self, status: Status | None) -> Outcome:
        killed = spawn.kill_orphans(status, self.key)
        if killed:
            log.runtime.warning("job %s: killed %d processes its vanished agent left behind", self.key, killed)
        pid = f" (pid {status.agent_pid})" if status else ""
        last = _last_line(self.ws / "agent.log")
        reason = f"the job's agent{pid} vanished without reporting how the job ended"
        if last:
            reason += f"; agent.log ends with: {last}"
        return Outcome("lost", reason, started=status.started if status else None, ended=time.time())

    # -- exited steps ----------------------------------------------------------------------

    async def _exited_steps(self, outcome: Outcome) -> None:
        while await _record(self._tail_once):  # drain: the agent has written everything
            pass
        job = await asyncio.to_thread(self._records.get_job, self.project, self.number)
        if not job.get("output_version"):
            await asyncio.to_thread(self._save_output)
        try:
            await asyncio.to_thread(workspace.release_inputs, self.ws)
        except OSError:
            log.runtime.exception("job %s: removing its input copies failed", self.key)
        if job["state"] == "starting" and outcome.state not in ("failed", "stopped", "lost"):
            await asyncio.to_thread(self._records.set_state, self.project, self.number, "running", "",
                                    started=outcome.started or time.time())
        if job["state"] in ("starting", "running"):
            fields = {"exit_code": outcome.exit_code}
            if outcome.ended:
                fields["ended"] = outcome.ended
            await asyncio.to_thread(self._records.set_state, self.project, self.number, outcome.state,
                                    outcome.reason, **fields)
        if self._process is not None:
            await asyncio.to_thread(self._process.wait)

    def _save_output(self) -> None:
        output = self.ws / "output"
        if not output.is_dir():
            return
        name = f"{self.project}/{self.number}/output"
        try:
            tree = self._store.snapshot(output)
            version = self._store.catalog.add_version(name, tree, message=f"output of {self.key}")
        except Exception as exc:  # the job's result stands; say what happened to its output
            log.runtime.exception("job %s: saving /output failed", self.key)
            self._records.add_event(self.project, self.number, "output", f"saving /output failed: {exc}")
            return
        self._records.update_job(self.project, self.number, output_version=version.ref)
        self._records.add_event(self.project, self.number, "output", f"/output saved as {version.ref}",
                                {"tree": str(tree)})


def _outcome_of(status: Status) -> Outcome:
    return Outcome(status.outcome or "failed", status.reason or "", status.exit_code, status.started, status.ended)


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
