"""The leader's archiver: finished jobs leave the hot state after an age or past a count.

Every ``archive_interval`` seconds (sooner when a burst leaves ``archive_keep`` +
``archive_batch`` jobs hot) the leader looks at the hot jobs (live work and recent history,
so this is small) and commits ``job.archive`` for those :func:`choose` picks, at most
``archive_batch`` at a time (a batch that was full is followed by the next at once):

- only *finished* jobs: a final state, and every part of a gang final too;
- none that a live job refers to (an active or queued job that mounts its ``/output``);
- the oldest first (by when they ended), each one that ended more than ``archive_after``
  seconds ago, and as many more as it takes to keep at most ``archive_keep`` finished jobs hot.

The state machine checks again as it applies the command (a job that changed meanwhile
stays). What an archived job is, and how it is still listed: :mod:`floydd.cluster.state.archive`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterable, Protocol

from floydd import log
from floydd.cluster.config import ClusterConfig
from floydd.cluster.state.commands import MAX_ARCHIVE
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError
from floydd.model import FINAL_STATES, Job

__all__ = ["Archiver", "Leading", "choose", "finished", "referenced"]

_log = log.cluster.getChild("archiver")
_LOOK = 0.5
"""Seconds between looks at the hot state's size once it holds half of what makes a burst: a
burst of jobs is archived without waiting for the next round."""
_FOLLOWER_WAKE = 3600.0
"""A node that does not lead waits for a change of leadership, and looks this often anyway."""


def finished(job: Job) -> bool:
    """A final state, and every part of a gang final."""
    return job.state in FINAL_STATES and all(p.state in FINAL_STATES for p in job.parts)


def referenced(jobs: Iterable[Job]) -> set[str]:
    """Keys of jobs whose ``/output`` a job not yet finished mounts (``P/N/output:V`` -> ``P/N``)."""
    return {ref.name.removesuffix("/output") for job in jobs if job.state not in FINAL_STATES
            for ref in job.data_refs if ref.name.endswith("/output")}


def choose(jobs: Iterable[Job], *, now: float, keep: int, after: float, batch: int) -> list[str]:
    """The keys to archive now, oldest first (see the module docstring). Pure."""
    jobs = list(jobs)
    held = referenced(jobs)
    done = sorted((j for j in jobs if finished(j)), key=lambda j: (j.ended or j.created, j.number))
    excess = len(done) - keep
    cutoff = now - after
    out: list[str] = []
    for i, job in enumerate(done):
        if len(out) >= batch or (i >= excess and (job.ended or job.created) > cutoff):
            break
        if job.id not in held:
            out.append(job.id)
    return out


class Leading(Protocol):
    """What the archiver uses of the raft driver: whether this node leads, and a leader's
    (fenced) proposal."""

    @property
    def is_leader(self) -> bool: ...

    async def propose(self, cmd: dict, *, timeout: float | None = None, fenced: bool = False) -> Any: ...

    async def leader_change(self, timeout: float) -> None:
        """Return when leadership changes (or after ``timeout`` seconds)."""


class Archiver:
    """The loop the leader runs (every node runs it; only the leader acts). ``state``: the
    replicated state (its hot jobs); ``driver``: whether this node leads, and the proposal of
    ``job.archive``; ``config``: the archive's knobs (``archive_*``)."""

    def __init__(self, *, node_id: str, config: ClusterConfig, state: ClusterState, driver: Leading,
                 clock: Callable[[], float] = time.time) -> None:
        self.node_id, self.config = node_id, config
        self._state, self._driver, self._clock = state, driver, clock

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        due = 0.0
        while True:
            if not self._driver.is_leader:      # nothing to do until this node leads (issue 23: it
                await self._driver.leader_change(_FOLLOWER_WAKE)      # looked twice a second)
                continue
            config = self.config
            batch = min(config.archive_batch, MAX_ARCHIVE)
            crowded = len(self._state.jobs) >= config.archive_keep + batch    # a burst of jobs
            again = False
            if crowded or loop.time() >= due:
                due = loop.time() + config.archive_interval
                try:
                    again = await self.archive_once() >= batch      # a full batch: the next one at once
                except FloyddError as exc:          # a lost leadership, a full disk: next round
                    _log.info("[%s] archiving finished jobs: %s", self.node_id, exc)
            await asyncio.sleep(0 if again else self._pause(due - loop.time(), batch))

    def _pause(self, until_due: float, batch: int) -> float:
        """Seconds to the next look of a leader: every ``_LOOK`` while the hot state is past half
        of what makes a burst, else at the round."""
        config = self.config
        look = min(_LOOK, config.archive_interval)
        if 2 * len(self._state.jobs) >= config.archive_keep + batch:
            return look
        return max(look, until_due)

    async def archive_once(self) -> int:
        """Commit one batch; how many jobs moved."""
        config = self.config
        keys = choose(self._state.jobs.values(), now=self._clock(), keep=config.archive_keep,
                      after=config.archive_after, batch=min(config.archive_batch, MAX_ARCHIVE))
        if not keys:
            return 0
        result = await self._driver.propose({"op": "job.archive", "jobs": keys, "ts": self._clock()},
                                            fenced=True)      # a leader action (authz)
        moved = len(result["archived"])
        _log.info("[%s] archived %d finished jobs (%s ... %s)", self.node_id, moved, keys[0], keys[-1])
        return moved
