"""Why queued jobs wait, as every node shows them: from the leader's memory, not the log.

The leader works out a reason for every job it leaves queued each round (its last plan,
:attr:`~floydd.scheduler.placer.ClusterScheduler.waiting`) and keeps them in memory. Committing
them instead cost raft entries for every queued job each time the head of the queue moved
(21 entries per job with 60 queued, 28.5 with 150, against under 8 to place and run one),
so nothing about a job that stays queued is written: the replicated job's ``waiting_for``
stays as submitted, and listings fill it in here. On the leader the reasons are read from
its scheduler; a follower asks the leader (the named read :data:`QUERY`, over
``/cluster/v1/read``, one round trip per listing); a stale read (``--stale``) talks to no one
and shows a reason only on the leader. A reason missing (a job submitted since the last
round, a leader just elected, a leader that cannot be reached) shows as "".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from floydd import log
from floydd.errors import FloyddError, InvalidSpec
from floydd.model import JobView

__all__ = ["QUERY", "WaitingReasons"]

QUERY = "jobs.waiting"
"""The named read a follower sends the leader: ``{"jobs": [key, ...]}`` -> ``{key: reason}``."""
MAX_KEYS = 100_000
"""The most jobs one read asks about."""

_log = log.scheduler.getChild("waiting")


class WaitingReasons:
    """Fills in ``waiting_for`` of queued jobs (see the module docstring)."""

    def __init__(self, cluster, scheduler) -> None:
        self.cluster, self.scheduler = cluster, scheduler
        driver = getattr(cluster, "driver", None)
        if driver is not None:
            driver.serve(QUERY, self._serve)

    async def fill(self, views: Iterable[JobView], *, stale: bool = False) -> list[JobView]:
        """``views`` with ``waiting_for`` of every queued job of the cluster among them filled in."""
        views = list(views)
        queued = [v.id for v in views if v.state == "queued" and not v.history]
        if not queued:
            return views
        reasons = await self._reasons(queued, stale=stale)
        return [replace(v, waiting_for=reasons.get(v.id, "")) if v.state == "queued" and not v.history else v
                for v in views]

    async def _reasons(self, keys: list[str], *, stale: bool) -> dict[str, str]:
        if self.cluster.is_leader:
            return self.scheduler.reasons(keys)
        if stale or getattr(self.cluster, "driver", None) is None:
            return {}
        try:
            reasons = await self.cluster.query(QUERY, {"jobs": keys}, via_leader=True)
        except FloyddError as exc:
            _log.info("why %d queued jobs wait is unknown here: %s", len(keys), exc)
            return {}
        return reasons if isinstance(reasons, dict) else {}

    def _serve(self, args: dict) -> dict[str, str]:
        keys = args.get("jobs")
        if not isinstance(keys, list) or len(keys) > MAX_KEYS or not all(isinstance(k, str) for k in keys):
            raise InvalidSpec(f"{QUERY}: jobs must be a list of at most {MAX_KEYS} job keys")
        return self.scheduler.reasons(keys)
