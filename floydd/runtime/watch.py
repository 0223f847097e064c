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
drain the log for at most :data:`DRAIN_BUDGET` seconds → save /output as dataset
``PROJECT/N/output`` (an empty /output makes no version: the record's ``output_version`` is
``""``, "saved nothing") → drop the input copies → final state (the runtime then releases the
GPUs and calls on_finished). A job whose process ended is final within seconds however much of
its log is left to record (issue 20: a job that printed 57 M metric lines stayed "running" for
minutes while they were recorded, and ``floyd stop`` with it): what the drain did not reach is
recorded behind the final state (:meth:`JobWatch.catch_up`, run by the runtime; the record is
marked ``log_behind`` first, so a daemon restarted meanwhile carries on), and the runtime then
says so (``on_recorded``: the cluster gets the job's final metrics).

Floods: the agent caps ``job.log`` (``max_log_mb``) and the watch says so in the job's events;
metric points past ``max_metric_points`` are thinned (:mod:`.limits`).

Nothing a job does stalls its watch. A metric line is recorded or skipped and counted
(:mod:`.tail`); a batch the records refuse is skipped and counted too, never retried. An
entry of /output a snapshot cannot hold is skipped, and named in the job's log and
events; the rest is saved (:mod:`.outputs`). When a write fails for lack of space (the
job's metrics, samples or /output) the job is ended ``failed``, "disk full at PATH", and
a job that fails while the disk is full says so (:mod:`.disk`), as does one whose agent
vanished while the disk was full, however long recording that takes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.agent.status import Status, read_status
from floydd.errors import NotFound, Unavailable
from floydd.runtime import spawn, tail, workspace
from floydd.runtime.disk import Disk, no_space
from floydd.runtime.limits import JobLimits
from floydd.runtime.output_save import OutputSaver

__all__ = ["JobWatch", "Outcome"]

DRAIN_BUDGET = 1.0
"""Seconds the exited steps spend recording what is left of the log before the final state is
set; the rest is recorded behind it."""
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

    def __init__(self, *, project: str, number: int, ws: Path, records, store, disk: Disk,
                 sample_interval: float, tail_interval: float,
                 sampler: Callable[[int], dict | None], forget: Callable[[int], None] | None = None,
                 process=None, asked: Callable[[], tuple[str, str] | None] | None = None,
                 max_log_bytes: int | None = None, max_points: int = 0) -> None:
        self.project, self.number, self.ws = project, number, Path(ws)
        self.key = f"{project}/{number}"
        self._records, self._store = records, store
        self._sample_interval, self._tail_interval = sample_interval, tail_interval
        self._sampler, self._forget = sampler, forget
        self._sampled: set[int] = set()
        self._process = process  # Popen of an agent this daemon started (to reap it)
        self._offset = 0
        self._disk = disk
        self._failure: str | None = None  # "disk full at PATH": the job ends failed, whatever it exits with
        self._warned = False  # about skipped metric lines (once per watch; the records count them all)
        self._settled: Outcome | None = None  # the outcome to record, once decided (kept across tries)
        self._asked = asked or (lambda: None)  # (outcome, reason) the runtime asked the agent to end the job as
        self._full_at_end = False  # the disk was full when the end was seen (it may have room by the time
        # the end is recorded: the records wait for space, and someone frees it)
        self._limits = JobLimits(max_log_bytes=max_log_bytes, max_points=max_points,
                                 event=self._event, events=lambda: records.events(project, number))
        self._points = 0  # metric points recorded (read from the records when the watch (re)starts)
        self.behind = False
        """Whether the exited steps left part of the log to :meth:`catch_up`."""
        self._stalled = False  # a batch could not be recorded for lack of space
        self._attempt: int | None = None  # of the record being filled (read with the log offset)
        self._saver = OutputSaver(project=project, number=number, ws=self.ws, records=records, store=store,
                                  disk=disk, event=self._event, note=self._note, fail=self._fail)

    async def run(self) -> Outcome:
        """Watch until the job ended; then record it. Returns the final outcome. Called again
        after it raised (the records unavailable, the disk full), it picks up from the records."""
        await asyncio.to_thread(self._load)
        exited = asyncio.Event()
        pidfd = await asyncio.to_thread(self._open_pidfd)
        loop = asyncio.get_running_loop()
        if pidfd is not None:
            loop.add_reader(pidfd, exited.set)
        try:
            outcome = await self._follow(exited)
            if outcome.state in ("failed", "lost") and not self._full_at_end:
                self._full_at_end = await asyncio.to_thread(self._disk.check)
        finally:
            if pidfd is not None:
                loop.remove_reader(pidfd)
                os.close(pidfd)
            if self._forget is not None:
                for pid in self._sampled:
                    self._forget(pid)
        return await self._exited_steps(outcome)

    async def _follow(self, exited: asyncio.Event) -> Outcome:
        next_sample = time.monotonic() + min(1.0, self._sample_interval)
        while True:
            status, is_alive, more = await _record(self._tick)
            if self._limits.needs_look(status):
                await asyncio.to_thread(self._limits.seen, status)
            if status is not None and status.exited:
                return _outcome_of(status)
            if not is_alive:
                status = await asyncio.to_thread(read_status, self.ws)  # it may have just finished
                if status is not None and status.exited:
                    await asyncio.to_thread(self._limits.seen, status)
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

    def _load(self) -> None:
        """Where recording got to: the log offset and the metric points so far."""
        self._attempt = self._records.get_run(self.project, self.number).attempt
        self._offset = self._records.get_log_offset(self.project, self.number)
        self._points = self._records.metric_points(self.project, self.number) if self._limits.max_points else 0

    def _tail_once(self) -> bool:
        """Record the new complete lines' metrics; True when a full chunk was read (more waits)."""
        chunk = tail.read_chunk(self.ws / "job.log", self._offset)
        if chunk.offset == self._offset:
            return False
        scan = self._limits.thin(chunk.scan(), self._points)
        try:  # MetricPoint is the (name, value, step, ts) row add_metrics takes
            self._records.add_metrics(self.project, self.number, scan.points, log_offset=chunk.offset,
                                      skipped=scan.skipped, first_skip=scan.first_skip, attempt=self._attempt)
        except (Unavailable, NotFound):   # NotFound: the record was deleted or replaced (a new attempt)
            raise
        except Exception as exc:
            if no_space(exc):  # these lines again at the next tick; the job is ended
                self._stalled = True
                self._no_space(self._records.path)
                return False
            # a batch the records refuse must not stall the log: skip it, counted
            log.runtime.warning("job %s: metrics at log offset %d not recorded: %s", self.key, self._offset, exc)
            self._records.add_metrics(self.project, self.number, (), log_offset=chunk.offset,
                                      skipped=scan.skipped + len(scan.points),
                                      first_skip=scan.first_skip or f"the records refused them: {exc}",
                                      attempt=self._attempt)
            scan = tail.Scan([], scan.skipped + len(scan.points), scan.first_skip)
        self._points += len(scan.points)
        if scan.skipped and not self._warned:
            self._warned = True
            log.runtime.warning("job %s: metric line skipped (%s); skipped lines are counted in its events",
                                self.key, scan.first_skip)
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
            try:
                self._records.add_system_samples(self.project, self.number, [sample])
            except Exception as exc:
                if not no_space(exc):
                    raise
                self._no_space(self._records.path)

    def _no_space(self, path: Path) -> None:
        """A write for this job failed for lack of space: end the job failed (its agent told to
        write no more to its log), then release the reserve to record that with."""
        if self._failure is None:
            self._failure = self._disk.why(path)
            log.runtime.warning("job %s: %s; ending it", self.key, self._failure)
            spawn.request_stop(self.ws, self._failure, "failed", keep_log=False, make_room=self._disk.check)
        self._disk.check()

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

    async def _exited_steps(self, outcome: Outcome) -> Outcome:
        self.behind = not await self._drain()   # the agent has written everything; the rest is caught up later
        run = await asyncio.to_thread(self._records.get_run, self.project, self.number)
        if not run.output_version:
            await asyncio.to_thread(self._save_output)
        try:
            await asyncio.to_thread(workspace.release_inputs, self.ws)
        except OSError:
            log.runtime.exception("job %s: removing its input copies failed", self.key)
        outcome = await asyncio.to_thread(self._settle, outcome, self._asked())
        try:
            if self.behind:   # marked before the final state: a daemon restarted in between still catches up
                await asyncio.to_thread(self._mark_behind)
            if run.state == "starting" and outcome.state not in ("failed", "stopped", "lost"):
                await asyncio.to_thread(self._records.set_state, self.project, self.number, "running", "",
                                        started=outcome.started or time.time())
            if run.state in ("starting", "running"):
                fields = {"exit_code": outcome.exit_code}
                if outcome.ended:
                    fields["ended"] = outcome.ended
                await asyncio.to_thread(self._records.set_state, self.project, self.number, outcome.state,
                                        outcome.reason, **fields)
        except Exception as exc:  # retried by the runtime; on a full disk, with the reserve released
            if no_space(exc):
                await asyncio.to_thread(self._disk.check)
            raise
        if self._process is not None:
            await asyncio.to_thread(self._process.wait)
        return outcome

    async def _drain(self) -> bool:
        """Record what is left of the log, for at most :data:`DRAIN_BUDGET` seconds; True when
        it got to the end (False too when a batch could not be recorded for lack of space)."""
        deadline = time.monotonic() + DRAIN_BUDGET
        self._stalled = False
        while await _record(self._tail_once):
            if time.monotonic() >= deadline:
                return False
        return not self._stalled

    def _mark_behind(self) -> None:
        """Mark the record ``log_behind``; on a full disk only said (the final state comes
        first: the catch-up of this daemon goes on, a restarted one does not know of it)."""
        try:
            self._records.set_log_behind(self.project, self.number, True)
        except Exception as exc:
            if not no_space(exc):
                raise
            log.runtime.warning("job %s: cannot mark its log as not recorded to the end (disk full)", self.key)

    async def catch_up(self) -> bool:
        """Record the rest of an ended job's log, behind its final state, from where recording
        got to, and clear its ``log_behind`` mark; False (the mark stays) when the disk is full:
        the runtime tries again later."""
        await _record(self._load)
        self._stalled = False
        while await _record(self._tail_once):
            pass
        if self._stalled:
            return False
        await asyncio.to_thread(self._records.set_log_behind, self.project, self.number, False)
        return True

    def _settle(self, outcome: Outcome, asked: tuple[str, str] | None = None) -> Outcome:
        """The outcome to record: ``failed`` with why when a write of this job's failed for lack
        of space, when the runtime ended it as failed (the disk filled up: the agent may not have
        learnt why when its stop file could not be written), or when it failed (or vanished) while
        the disk is full, then or by now. Decided once: a try after the records refused it (the
        disk was full) records the same."""
        if self._settled is None:
            self._settled = self._judge(outcome, asked)
        return self._settled

    def _judge(self, outcome: Outcome, asked: tuple[str, str] | None) -> Outcome:
        why = self._failure
        if why is None and asked is not None and asked[0] == "failed":
            why = asked[1]
            if outcome.state == "stopped":  # it ended on that ask, never told why (no room for its stop file)
                return replace(outcome, state="failed", reason=why)
        if why is None and outcome.state in ("failed", "lost") and (self._full_at_end or self._disk.check()):
            why = self._disk.why()
        if why is None:
            return outcome
        if outcome.reason.startswith("disk full at "):  # the agent's words: its log could not be written
            return replace(outcome, state="failed")
        return replace(outcome, state="failed", reason=f"{why} ({outcome.reason})" if outcome.reason else why)

    def _save_output(self) -> None:
        self._saver.save()

    def _fail(self, why: str) -> None:
        self._failure = self._failure or why

    def _event(self, kind: str, message: str, data: dict | None = None) -> None:
        """Add an event; on a full disk it is only logged (the job's reason says what matters)."""
        try:
            self._records.add_event(self.project, self.number, kind, message, data)
        except Exception as exc:
            if not no_space(exc):
                raise
            log.runtime.warning("job %s: event not recorded (disk full): %s", self.key, message)

    def _note(self, *lines: str) -> None:
        try:
            workspace.note(self.ws / "job.log", *lines, stream=b"e")
        except OSError as exc:
            log.runtime.warning("job %s: cannot add to its log: %s", self.key, exc)


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
