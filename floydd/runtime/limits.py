"""A job against the box's limits on what it may flood the box with (issue 20, "Limits").

Two of them concern the watch of a running job (:mod:`.watch`):

- ``max_log_mb``: the agent caps ``job.log`` itself (:mod:`floydd.agent.capture`); its status
  says when the cap was reached and, at the end, how much was dropped. The job's events say
  the same, once each (:class:`JobLimits`), so ``floyd info`` shows it.
- ``max_metric_points``: past that many points recorded for a job, each batch read from its
  log (1 MiB) records only the last point of each metric (:func:`thin`): the series thins out,
  the last values stay right, and the others are counted as skipped with the job's other
  skipped metric lines. A job's records stay bounded whatever it prints.
"""

from __future__ import annotations

from typing import Callable, Sequence

from floydd.agent.status import Status
from floydd.model import format_size
from floydd.runtime import tail

__all__ = ["JobLimits", "thin", "LIMIT_KIND"]

LIMIT_KIND = "limit"
"""The kind of the events that say a job reached one of the box's limits."""


def thin(points: Sequence[tail.MetricPoint], room: int) -> list[tail.MetricPoint]:
    """The first ``room`` points, then only the last point of each metric of the rest (in
    their order)."""
    room = max(0, room)
    last: dict[str, int] = {}
    for i in range(room, len(points)):
        last[points[i].name] = i
    return list(points[:room]) + [points[i] for i in sorted(last.values())]


class JobLimits:
    """One job's limits as its watch meets them; ``event(kind, message, data)`` records an
    event of the job, ``events()`` reads them back (one of each limit event per job, also
    across daemon restarts)."""

    def __init__(self, *, max_log_bytes: int | None, max_points: int,
                 event: Callable[[str, str, dict | None], None], events: Callable[[], list[dict]]) -> None:
        self.max_log_bytes, self.max_points = max_log_bytes, max_points
        self._event, self._events = event, events
        self._said: set[str] = set()

    def thin(self, scan: tail.Scan, recorded: int) -> tail.Scan:
        """``scan`` as recorded when the job already has ``recorded`` points (see the module
        docstring); an event the first time it thins."""
        if not self.max_points or recorded + len(scan.points) <= self.max_points:
            return scan
        points = thin(scan.points, self.max_points - recorded)
        self._once("points", f"the job's metric points reached the cap of {self.max_points:,} (max_metric_points): "
                             "from here on, of every 1 MiB of its log only the last point of each metric is "
                             "recorded; the others are counted as skipped", {"max_metric_points": self.max_points})
        why = f"past the job's {self.max_points:,} metric points (max_metric_points), thinned"
        return tail.Scan(points, scan.skipped + len(scan.points) - len(points), scan.first_skip or why)

    def seen(self, status: Status | None) -> None:
        """The agent's status: an event when it says the log reached its cap, and when it says
        (at the end) how much was dropped."""
        if status is None:
            return
        if status.log_capped and "capped" not in self._said:
            self._once("capped", f"job.log reached {self._cap} (max_log_mb): later lines are dropped and counted, "
                                 "the last line of each metric kept")
        if status.exited and status.log_dropped_lines and "dropped" not in self._said:
            self._once("dropped", f"{status.log_dropped_lines:,} lines ({format_size(status.log_dropped_bytes)}) "
                                  f"dropped: the job's log reached {self._cap} (max_log_mb)",
                       {"dropped_lines": status.log_dropped_lines, "dropped_bytes": status.log_dropped_bytes})

    def needs_look(self, status: Status | None) -> bool:
        """Whether :meth:`seen` has something to say about ``status`` (checked on every tick)."""
        return status is not None and ((bool(status.log_capped) and "capped" not in self._said) or
                                       (status.exited and bool(status.log_dropped_lines) and
                                        "dropped" not in self._said))

    @property
    def _cap(self) -> str:
        return f"its {format_size(self.max_log_bytes)} cap" if self.max_log_bytes else "its cap"

    def _once(self, what: str, message: str, data: dict | None = None) -> None:
        self._said.add(what)
        if not any(e["kind"] == LIMIT_KIND and e["message"] == message for e in self._events()):
            self._event(LIMIT_KIND, message, data)
