"""The prestart steps of a job on this node, queued/starting → running (or failed, with why).

:class:`Prestart` is the part of :class:`~floydd.runtime.runner.NodeRuntime` that owns them:
0. ``sandboxing.check`` (require), 1. ``workspace.prepare``, 2. ``envs.python_bin_for``,
3. ``spawn.start_agent``; then the record says running and the runtime watches the agent
(``watch``). A stop noted meanwhile (``stop_requests``, the runtime's) is seen between the
steps: the job ends before it runs (``end``). Each step can run again after a crash.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Awaitable, Callable

from floydd import log
from floydd.agent.jobenv import threads_env
from floydd.agent.spec import AgentSpec
from floydd.errors import FloyddError
from floydd.model import Run
from floydd.runtime import envs, fence, spawn, workspace
from floydd.runtime.disk import Disk, no_space
from floydd.runtime.sandboxing import Sandboxing
from floydd.runtime.spare import Spares

__all__ = ["Prestart"]

Key = tuple[str, int]


class _StopRequested(Exception):
    pass


class Prestart:
    """Takes a starting job through the prestart steps to a running agent."""

    def __init__(self, *, state_dir: Path, store, records, disk: Disk, sandboxing: Callable[[], Sandboxing],
                 builds: envs.BuildPolicy, env_pass, stop_grace: float, job_user: tuple[int, int] | None,
                 max_log_bytes: int | None, stop_requests: dict[Key, tuple[str, str]], spares: Spares | None,
                 end: Callable[[Key, str, str], Awaitable[None]],
                 watch: Callable[[str, int, Path, object], None]) -> None:
        self._state_dir, self._store, self._records, self._disk = state_dir, store, records, disk
        self._sandboxing, self._builds, self._env_pass = sandboxing, builds, env_pass
        self._stop_grace, self._job_user, self._max_log_bytes = stop_grace, job_user, max_log_bytes
        self._stop_requests = stop_requests
        """The runtime's: key -> (outcome, reason) of a stop asked for."""
        self._spares = spares
        self._end, self._watch = end, watch

    async def run(self, run: Run, ws: Path, gpu_ids: tuple[int, ...], *, command: str | None = None,
                        env: dict[str, str] | None = None, resume: str | None = None) -> None:
        project, number = key = run.key
        started = time.monotonic()
        if self._spares is not None:    # its imports overlap this job's preparation (not awaited)
            asyncio.get_running_loop().run_in_executor(None, self._spares.refill)
        if await asyncio.to_thread(self._disk.check):  # what is free is for recording and cleaning up
            await self._end(key, "failed", f"{self._disk.why()}: the job was not started")
            return
        try:
            sandboxing = await asyncio.to_thread(self._sandboxing)
            sandboxing.check()   # a job placed here from another box, while this one requires a sandbox
            mounts = await asyncio.to_thread(workspace.prepare, ws, run, self._store, resume=resume)
            self._check_stop(key)
            if sandboxing.warning:
                await asyncio.to_thread(self._say_unsandboxed, project, number, ws, sandboxing.warning)
            python_bin = await asyncio.to_thread(envs.python_bin_for, self._state_dir, ws / "code",
                                                 run.env, log_path=ws / "job.log",
                                                 bwrap=sandboxing.bwrap, policy=self._builds)
            self._check_stop(key)
            spec = AgentSpec(job=run.id, command=command or run.command,
                             env={**threads_env(run.resources.cpus, len(gpu_ids)),
                                  **{str(k): str(v) for k, v in run.params.items()}, **(env or {}),
                                  **fence.placement_env(self._state_dir, run.attempt)},
                             gpu_ids=gpu_ids, max_runtime=run.max_runtime,
                             python_bin=python_bin, mounts=mounts,
                             sandbox=sandboxing.mode, stop_grace=self._stop_grace, state_dir=str(self._state_dir),
                             uid=self._job_user[0] if self._job_user else None,
                             gid=self._job_user[1] if self._job_user else None,
                             max_log_bytes=self._max_log_bytes)
            handle = await asyncio.to_thread(spawn.start_agent, ws, spec, env_pass=self._env_pass, spares=self._spares)
        except _StopRequested:
            await self._end(key, *self._stop_requests.get(key, ("stopped", "stopped")))
            return
        except FloyddError as exc:
            await self._end(key, "failed", exc.message)
            return
        except Exception as exc:
            if no_space(exc):
                await asyncio.to_thread(self._disk.check)
                await self._end(key, "failed", f"{self._disk.why()}: the job could not be started")
                return
            log.runtime.exception("job %s/%d: prestart failed", project, number)
            await self._end(key, "failed", f"could not start the job: {exc!r}")
            return
        try:
            await asyncio.to_thread(self._records.set_state, project, number, "running", "", agent_pid=handle.pid)
        except Exception:  # the agent runs regardless: watch it, the exited steps settle the record
            log.runtime.exception("job %s/%d: recording running failed", project, number)
        log.runtime.info("job %s/%d running (agent %d, %.0f ms to start)", project, number, handle.pid,
                         (time.monotonic() - started) * 1000)
        if key in self._stop_requests:  # stop_job came while the agent was being started
            outcome, reason = self._stop_requests[key]
            await asyncio.to_thread(spawn.request_stop, ws, reason, outcome)
        self._watch(project, number, ws, handle.process)

    def _say_unsandboxed(self, project: str, number: int, ws: Path, warning: str) -> None:
        """In the job's log and events: it runs without a sandbox, and what that means."""
        workspace.note(ws / "job.log", f"floydd: WARNING: {warning}", stream=b"e")
        try:
            self._records.add_event(project, number, "sandbox", warning)
        except Exception as exc:   # the job runs all the same; the daemon's log said it at start-up
            log.runtime.warning("job %s/%d: event not recorded: %s", project, number, exc)

    def _check_stop(self, key: Key) -> None:
        if key in self._stop_requests:
            raise _StopRequested
