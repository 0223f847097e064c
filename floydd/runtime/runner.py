"""The job lifecycle on this node, as idempotent steps (Nomad's task-runner hooks).

::

    queued ──start_job──► starting ─────────────────────► running ───────────────► success | failed
                           prestart steps:                 agent runs the job;     stopped | timeout
                           0. sandboxing.check (require)
                           1. workspace.prepare            JobWatch tails job.log   (exited steps:
                           2. envs.python_bin_for          into records, samples,   drain log, save
                           3. spawn.start_agent            waits for the exit       /output, final
                              │                               │                    state, release)
                              └─ a step fails ──► failed      └─ agent gone without a final
                              └─ stop_job ──────► stopped        status ──► lost

    stop_job   starting: the next prestart step sees it → stopped; an agent spawned meanwhile
               is asked at once, and finds the stop file before it starts the job;
               running:  WORKSPACE/stop + SIGTERM to the agent → the agent ends the job → stopped
               (request_stop: the same without waiting, e.g. for a start still in progress)
    reattach   (daemon start) every starting/running job: agent alive → watch it again from
               the saved log offset; status exited → run the exited steps; agent gone without
               a final status → lost; starting and never spawned → redo the prestart steps.
               Then the state folder's free space is watched (:mod:`.disk`): on a full disk
               every job here ends failed, "disk full at PATH" (whatever writes would take what
               the daemon frees), no job starts, and the disk's reserve is released so the
               records can say so; a job whose log, output or metrics cannot be written for
               lack of space ends the same way
    close      stop watching (and give the disk's reserve back); agents are never killed (they
               outlive the daemon)
    catch up   a job whose log was not recorded to its end when it ended (a flood of metric
               lines) is final at once; the rest is recorded behind it (:mod:`.catchup`, also
               for those marked ``log_behind`` at reattach), then ``on_recorded`` says so

Every job process carries ``FLOYD_BOX``/``FLOYD_JOB``/``FLOYD_ATTEMPT`` (:mod:`.fence`), so the
box finds its runs by their processes whatever became of their agents: ``scan_runs`` for GPU
fencing and heartbeats, ``sweep`` to kill what is left of runs nobody holds. A rerun starts
with ``resume``: its ``/output`` is the last attempt's (:mod:`.checkpoint`, ``workspace``),
and ``checkpoint`` snapshots a running job's ``/output`` for the next one.

Each step can run again after a crash: prepare records what it restored, the log
offset is stored with each metric batch, /output is saved once (``output_version``),
and a final state is set only from starting/running.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Callable, Sequence

from floydd import log
from floydd.agent.jobenv import agent_env, pass_list
from floydd.agent.sandbox import probe_bwrap
from floydd.agent.status import read_status
from floydd.errors import Conflict, FloyddError, InvalidSpec, Unavailable
from floydd.model import DEFAULT_STOP_GRACE, FINAL_STATES, Run
from floydd.runtime import checkpoint, envs, fence, spawn, workspace
from floydd.runtime.catchup import CatchUps
from floydd.runtime.prestart import Prestart
from floydd.runtime.sandboxing import Sandboxing, resolve
from floydd.runtime.spare import Spares
from floydd.runtime.disk import CHECK_INTERVAL, IDLE_CHECK_INTERVAL, Disk, no_space
from floydd.runtime.watch import JobWatch
from floydd.tasks import cancel_and_wait

__all__ = ["NodeRuntime"]

Key = tuple[str, int]
_SETTINGS = ("auto", "require", "prefer", "bwrap", "none")


class NodeRuntime:
    """Starts, watches, stops and re-adopts the jobs of this node (one per daemon)."""

    def __init__(self, *, state_dir: Path, store, records, sandbox: str = "auto", serves_others: bool = False,
                 builds: envs.BuildPolicy | None = None, env_pass: str = "",
                 sample_interval: float = 5.0, tail_interval: float = 0.2, stop_grace: float = DEFAULT_STOP_GRACE,
                 on_finished: Callable[[str, int], None] | None = None,
                 sampler: Callable[[int], dict | None] | None = None,
                 job_user: tuple[int, int] | None = None,
                 on_recorded: Callable[[str, int], None] | None = None,
                 max_log_bytes: int | None = None, max_metric_points: int = 0, spare_idle: float = 0.0) -> None:
        if sandbox not in _SETTINGS:
            raise InvalidSpec(f"sandbox {sandbox!r} is unknown", hint=f"use one of {', '.join(_SETTINGS)}")
        self.state_dir = Path(state_dir).absolute()
        self._store, self._records = store, records
        self._sandbox, self._serves_others = sandbox, serves_others
        self._job_user = job_user
        """System mode: ``(uid, gid)`` every job runs as (:mod:`floydd.agent.jobuser`)."""
        self._sandboxing: Sandboxing | None = None
        self._builds = builds or envs.BuildPolicy()
        self._env_pass = pass_list(env_pass)
        self._sample_interval, self._tail_interval, self._stop_grace = sample_interval, tail_interval, stop_grace
        self._on_finished = on_finished
        self._max_log_bytes, self._max_metric_points = max_log_bytes, max_metric_points
        self._catch_ups = CatchUps(spawn=self._spawn, retry=tail_interval, on_recorded=on_recorded)
        """``on_recorded(project, number)``: an ended job's log is recorded to its end, behind its
        final state (:mod:`.catchup`; the cluster then gets its final metrics)."""
        self._sampler = sampler or _default_sampler
        self._forget = None if sampler else _default_forget
        self._held: dict[Key, tuple[int, ...]] = {}
        self._released: dict[Key, asyncio.Event] = {}
        self._watches: dict[Key, asyncio.Task] = {}
        self._stop_requests: dict[Key, tuple[str, str]] = {}  # key -> (outcome, reason)
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.disk = Disk(self.state_dir)
        self._spares = Spares(agent_env(os.environ, self._env_pass), idle=spare_idle) if spare_idle > 0 else None
        """The agent started ahead of the next job (:mod:`.spare`): ``spare_idle`` seconds after a start."""
        self._prestart = Prestart(state_dir=self.state_dir, store=store, records=records, disk=self.disk,
                                  sandboxing=lambda: self.sandboxing, builds=self._builds, env_pass=self._env_pass,
                                  stop_grace=stop_grace, job_user=job_user, max_log_bytes=max_log_bytes,
                                  stop_requests=self._stop_requests, end=self._end_before_start, watch=self._watch,
                                  spares=self._spares)

    # -- queries -------------------------------------------------------------------------------

    def running(self) -> dict[Key, list[int]]:
        """Every job this runtime holds (starting or running) → the GPUs it holds."""
        return {key: list(gpus) for key, gpus in self._held.items()}

    async def scan_runs(self) -> dict[tuple[str, int], dict]:
        """This box's live runs found by their processes (:mod:`.fence`): ``(job, attempt) ->
        {"gpus", "pids"}``, held here or not."""
        return await asyncio.to_thread(fence.scan, self.state_dir)

    async def sweep(self) -> int:
        """Kill what is left of runs this runtime does not hold (their agent is gone, or they
        outlived their stop); how many processes were signalled."""
        runs = await self.scan_runs()
        held = {f"{project}/{number}" for project, number in self._held}   # after the scan: a run
        strays = {run: found for run, found in runs.items() if run[0] not in held}   # started since is held
        return await asyncio.to_thread(fence.kill, strays) if strays else 0

    async def checkpoint(self, project: str, number: int, previous: str | None = None):
        """A snapshot of a running job's ``/output`` (:mod:`.checkpoint`), or None: empty,
        unchanged since ``previous`` (a tree), or the job not held here."""
        if (project, number) not in self._held or self.disk.full:
            return None
        ws = workspace.job_dir(self.state_dir, project, number)
        return await asyncio.to_thread(checkpoint.save, ws / "output", self._store, previous)

    @property
    def sandboxing(self) -> Sandboxing:
        """This box's sandbox and policy (:mod:`.sandboxing`), bwrap probed once (blocking)."""
        if self._sandboxing is None:
            self._sandboxing = resolve(self._sandbox, self._serves_others, probe_bwrap)
            if self._sandboxing.warning:
                log.runtime.warning("%s", self._sandboxing.warning)
        return self._sandboxing

    @property
    def sandbox_mode(self) -> str:
        """The sandbox jobs get here: "bwrap" or "none"."""
        return self.sandboxing.mode

    # -- lifecycle -------------------------------------------------------------------------------

    async def start_job(self, project: str, number: int, gpu_ids: Sequence[int], *, command: str | None = None,
                        env: dict[str, str] | None = None, resume: str | None = None) -> None:
        """Take a queued job through the prestart steps to running (or to failed, with why).
        ``command``/``env`` replace the recorded command and add to its environment (a gang's
        part runs the user's command under torchrun, :mod:`floydd.jobs.gang`); ``resume``: the
        tree its ``/output`` starts from (a rerun's last checkpoint; else it starts empty)."""
        if self._closed:
            raise Unavailable("the node runtime is shutting down", hint="retry once the daemon is back")
        key = (project, number)
        if key in self._held:
            return
        gpus = tuple(gpu_ids)   # the placement's, checked when it was committed (job.place)
        self._hold(key, gpus)  # before any await: a second call for the same job returns above
        try:
            await self._catch_ups.abandon(key)
            run = await asyncio.to_thread(self._records.get_run, project, number)
            ws = workspace.job_dir(self.state_dir, project, number)
            if run.state == "queued":
                await asyncio.to_thread(self._records.set_state, project, number, "starting", "",
                                        gpus=list(gpus), workspace=str(ws))
            elif run.state == "starting":
                await asyncio.to_thread(self._records.update_job, project, number, gpus=list(gpus), workspace=str(ws))
            else:
                raise Conflict(f"job {project}/{number} is {run.state}; only a queued job can start",
                               hint="run it again with floyd restart")
        except BaseException:
            self._release(key, notify=False)
            raise
        await self._prestart.run(run, ws, gpus, command=command, env=env or {}, resume=resume)

    def request_stop(self, project: str, number: int, reason: str = "stopped by user", *,
                     outcome: str = "stopped") -> bool:
        """Note a stop for a job this runtime holds, without waiting: a start in progress
        ends before the job runs, a running agent is signalled; the job ends as ``outcome``
        (stopped, or failed). True when this call asked (False: the runtime holds no such
        job, or a stop was asked already)."""
        asking = self._ask_stop((project, number), reason, outcome)
        if asking is None:
            return False
        self._spawn(asking, f"floydd.runtime.stop {project}/{number}")
        return True

    def _ask_stop(self, key: Key, reason: str, outcome: str, **kw):
        """The stop of :meth:`request_stop`, to await (None: not held, or asked already);
        ``kw`` for :func:`spawn.request_stop`."""
        if key not in self._held or key in self._stop_requests:
            return None
        self._stop_requests[key] = (outcome, reason)
        ws = workspace.job_dir(self.state_dir, *key)
        return asyncio.to_thread(spawn.request_stop, ws, reason, outcome, **kw)

    async def stop_job(self, project: str, number: int, reason: str = "stopped by user") -> None:
        """Stop a starting or running job and wait (up to stop_grace + 30 s) until it is recorded."""
        key = (project, number)
        run = await asyncio.to_thread(self._records.get_run, project, number)
        if run.state in FINAL_STATES:
            return
        if run.state == "queued" and key not in self._held:
            raise Conflict(f"job {project}/{number} is still queued; the queue stops it, not the runtime",
                           hint="floyd stop handles queued jobs")
        self._stop_requests[key] = ("stopped", reason)
        ws = self._workspace_of(run)
        await asyncio.to_thread(spawn.request_stop, ws, reason)
        if key not in self._held:  # a job of a previous daemon nobody re-adopted yet
            await self._adopt(run)
        released = self._released.get(key)
        if released is not None:
            try:
                await asyncio.wait_for(asyncio.shield(released.wait()), self._stop_grace + 30)
            except asyncio.TimeoutError:
                log.runtime.warning("job %s/%d: still not over %gs after stop", project, number,
                                    self._stop_grace + 30)

    async def reattach(self) -> None:
        """At daemon start: take every starting/running job of the records back in hand."""
        await asyncio.to_thread(lambda: self.sandboxing)   # probed (and said, if missing) at start-up
        await asyncio.to_thread(self.disk.check)
        runs = await asyncio.to_thread(self._records.list_runs, None, ["starting", "running"])
        for run in runs:
            try:
                await self._adopt(run)
            except Exception:
                log.runtime.exception("re-adopting job %s failed", run.id)
        for project, number in await asyncio.to_thread(self._records.logs_behind):
            try:        # ended with its log not recorded to the end: record the rest behind its end
                run = await asyncio.to_thread(self._records.get_run, project, number)
            except FloyddError as exc:
                log.runtime.warning("job %s/%d: its log is not recorded to the end: %s", project, number, exc)
                continue
            self._catch_ups.start(self._watcher(project, number, self._workspace_of(run), None))
        if not self._closed:
            self._spawn(self._watch_disk(), "floydd.runtime.disk")

    async def close(self) -> None:
        """Stop watching (the agents keep running and are re-adopted by the next daemon)."""
        self._closed = True
        await cancel_and_wait(self._tasks)
        if self._spares is not None:
            await asyncio.to_thread(self._spares.close)
        await asyncio.to_thread(self.disk.release)

    # -- steps ---------------------------------------------------------------------------------

    async def _end_before_start(self, key: Key, state: str, reason: str) -> None:
        log.runtime.info("job %s/%d %s before it ran: %s", *key, state, reason)
        try:
            await asyncio.to_thread(self._records.set_state, *key, state, reason)
        finally:
            self._release(key)

    async def _adopt(self, run: Run) -> None:
        project, number = key = run.key
        if key in self._held:
            return
        gpus = run.gpu_ids   # the record's
        self._hold(key, gpus)  # before any await, as in start_job
        ws = self._workspace_of(run)
        try:
            status = await asyncio.to_thread(read_status, ws)
            if status is None:
                if run.state == "starting":  # the daemon died before the agent started: redo the steps
                    log.runtime.info("job %s/%d: resuming its start", project, number)
                    self._spawn(self._prestart.run(run, ws, gpus), f"floydd.runtime.prestart {project}/{number}")
                else:
                    await self._end_before_start(key, "lost", "the job's agent never reported (see agent.log)")
                return
            if run.state == "starting" and status.started:
                await asyncio.to_thread(self._records.set_state, project, number, "running", "",
                                        agent_pid=status.agent_pid, started=status.started)
        except BaseException:
            self._release(key, notify=False)
            raise
        log.runtime.info("job %s/%d: watching agent %d again", project, number, status.agent_pid)
        self._watch(project, number, ws, None)

    def _watch(self, project: str, number: int, ws: Path, process) -> None:
        key = (project, number)
        task = self._spawn(self._run_watch(project, number, ws, process), f"floydd.runtime.watch {project}/{number}")
        self._watches[key] = task

    async def _run_watch(self, project: str, number: int, ws: Path, process) -> None:
        key = (project, number)
        delay = self._tail_interval
        # one watch for every try: what it learnt (a write failed for lack of space; the outcome
        # it settled on while the disk was full) holds when the records can take it
        watch = self._watcher(project, number, ws, process)
        try:
            while True:
                try:
                    outcome = await watch.run()
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # e.g. the records briefly unavailable: watch again, from the saved offset
                    if no_space(exc):  # space comes back when someone frees it: look again soon
                        log.runtime.warning("job %s/%d: cannot record it, the disk is full; retrying", project, number)
                        await asyncio.sleep(CHECK_INTERVAL)
                        continue
                    log.runtime.exception("watching job %s/%d failed; retrying in %.1fs", project, number, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
        finally:
            self._watches.pop(key, None)
        log.runtime.info("job %s/%d ended: %s (%s)", project, number, outcome.state, outcome.reason)
        self._release(key)
        if watch.behind:
            self._catch_ups.start(watch)

    def _watcher(self, project: str, number: int, ws: Path, process) -> JobWatch:
        key = (project, number)
        return JobWatch(project=project, number=number, ws=ws, records=self._records, store=self._store,
                        sample_interval=self._sample_interval, tail_interval=self._tail_interval,
                        sampler=self._sampler, forget=self._forget, process=process, disk=self.disk,
                        asked=lambda: self._stop_requests.get(key), max_log_bytes=self._max_log_bytes,
                        max_points=self._max_metric_points)

    def _workspace_of(self, run: Run) -> Path:
        return Path(run.workspace) if run.workspace else workspace.job_dir(self.state_dir, run.project, run.number)

    async def _watch_disk(self) -> None:
        """Every CHECK_INTERVAL (IDLE_CHECK_INTERVAL with no job here and room): on a full disk
        end every job here as failed (whatever writes would take the space the daemon frees to
        record it) and release the reserve; allocate it again once there is room."""
        while True:
            await asyncio.sleep(CHECK_INTERVAL if self._held or self.disk.full else IDLE_CHECK_INTERVAL)
            try:
                await self.end_for_full_disk()
            except Exception:  # a bug here must not stop the watching
                log.runtime.exception("checking the free space of %s failed", self.state_dir)

    async def end_for_full_disk(self) -> None:
        """On a full disk, end every job this runtime holds as failed, "disk full at STATE"
        (each agent told to write no more to its log), then release the reserve to record
        that with; allocate it again once there is room."""
        if await asyncio.to_thread(self.disk.check, release=False):
            why = self.disk.why()
            asks = {key: self._ask_stop(key, why, "failed", keep_log=False, make_room=self.disk.check)
                    for key in list(self._held)}
            asked = [key for key, ask in asks.items() if ask is not None]
            signalled = await asyncio.gather(*(asks[key] for key in asked), return_exceptions=True)
            for (project, number), done in zip(asked, signalled):
                if isinstance(done, BaseException):
                    log.runtime.warning("job %s/%d: asking it to end failed: %s", project, number, done)
                elif done:
                    log.runtime.warning("job %s/%d: %s; ending it", project, number, why)
        await asyncio.to_thread(self.disk.check)

    # -- bookkeeping -----------------------------------------------------------------------------

    def _hold(self, key: Key, gpus: tuple[int, ...]) -> None:
        self._held[key] = gpus
        self._released[key] = asyncio.Event()

    def _release(self, key: Key, *, notify: bool = True) -> None:
        self._held.pop(key, None)
        self._stop_requests.pop(key, None)
        event = self._released.pop(key, None)
        if event is not None:
            event.set()
        if notify and self._on_finished is not None:
            try:
                self._on_finished(*key)
            except Exception:
                log.runtime.exception("on_finished(%s, %d) failed", *key)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _default_sampler(pid: int) -> dict | None:
    """``floydd.node.sample_process_tree`` (the node's psutil + NVML view of a process tree)."""
    from floydd.node import sample_process_tree
    return sample_process_tree(pid)


def _default_forget(pid: int) -> None:
    from floydd.node import forget_process_tree
    forget_process_tree(pid)
