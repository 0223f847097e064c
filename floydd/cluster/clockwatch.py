"""This box's clock against the leader's: measured before each heartbeat, shown, logged.

A part of :class:`~floydd.cluster.service.ClusterService` (``service.clocks``). The leader
answers the named read ``clock`` from memory with its wall clock; every other box asks it
just before its heartbeat and sends the reading with it (``node.health`` ``clock``, level 3:
:mod:`floydd.cluster.clockskew` has the arithmetic). A box past ``max_clock_skew`` is logged
at WARNING by itself and by the leader, once when the skew starts and once when it ends.
Nothing is decided on a reading: liveness is monotonic (:mod:`floydd.cluster.heard`).
"""

from __future__ import annotations

from typing import Any, Callable

from floydd import log
from floydd.cluster import clockskew
from floydd.cluster.driver.applied import Applied
from floydd.cluster.clockskew import ClockReading
from floydd.errors import FloyddError

__all__ = ["ClockWatch"]

_log = log.cluster.getChild("clock")


class ClockWatch:
    """Measures this box's clock against the leader's; says how every box's stands."""

    def __init__(self, *, node_id: str, driver: Any, state: Any, limit: float, timeout: float,
                 clock: Callable[[], float]) -> None:
        self.node_id, self.limit = node_id, limit
        self._driver, self._state, self._timeout, self._clock = driver, state, timeout, clock
        self.reading: ClockReading | None = None
        """This box's, as last measured (None: not yet, or no leader answered)."""
        self._own, self._theirs = clockskew.Episodes(), clockskew.Episodes()
        driver.serve(clockskew.QUERY, lambda args: {"now": self._clock()})
        driver.on_apply(self._watch)

    def view(self, node_id: str) -> dict:
        """How ``node_id``'s clock stands, for ``floyd nodes`` and ``floydd members``:
        ``clock_offset`` (seconds the box is ahead of the leader, negative: behind; None: not
        measured), ``clock`` (in words) and ``clock_skewed`` (past ``max_clock_skew``)."""
        reading = ClockReading.from_wire((self._state.nodes.get(node_id) or {}).get("clock"))
        if node_id == self.node_id and self.reading is not None:
            reading = self.reading                  # this box's own, fresher than its last beat
        return {"clock_offset": None if reading is None else round(-reading.offset, 3),
                "clock": clockskew.describe(reading), "clock_skewed": clockskew.skewed(reading, self.limit)}

    async def measure(self) -> ClockReading | None:
        """Measure this box's clock against the leader's (None: no leader, or one that does
        not answer ``clock``: an older release) and log a skew that starts or ends."""
        if self._driver.is_leader:
            reading = ClockReading(offset=0.0, rtt=0.0)
        else:
            sent = self._clock()
            try:
                answer = await self._driver.query(clockskew.QUERY, via_leader=True, timeout=self._timeout)
            except FloyddError as exc:
                _log.debug("[%s] measuring the clock against the leader's: %s", self.node_id, exc)
                return None
            received = self._clock()
            now = answer.get("now") if isinstance(answer, dict) else None
            if type(now) not in (int, float):
                return None
            reading = clockskew.measure(sent, now, received)
        self.reading = reading
        change = self._own.see(self.node_id, reading, self.limit)
        if change == "start":
            _log.warning("[%s] this box's clock is %s (more than max_clock_skew, %.0fs): set its time right (NTP: "
                         "timedatectl set-ntp true); the times it writes are off, and TLS with the other boxes fails "
                         "once clocks are an hour apart", self.node_id, clockskew.describe(reading), self.limit)
        elif change == "end":
            _log.warning("[%s] this box's clock is back in step with the leader's (%s)", self.node_id,
                         clockskew.describe(reading))
        return reading

    def _watch(self, event: Applied) -> None:
        """On the leader: log a box whose heartbeat says its clock went past the limit, or is
        back within it (once each)."""
        cmd = event.command
        if cmd is None or event.replay or cmd.get("op") != "node.health" or "clock" not in cmd \
                or cmd.get("id") == self.node_id or not self._driver.is_leader:
            return
        reading = ClockReading.from_wire(cmd["clock"])
        change = self._theirs.see(cmd["id"], reading, self.limit)
        if change is not None:
            name = (self._state.nodes.get(cmd["id"]) or {}).get("name") or cmd["id"]
            _log.warning("[%s] box %s: its clock is %s%s", self.node_id, name, clockskew.describe(reading),
                         f" (more than max_clock_skew, {self.limit:.0f}s): set its time right" if change == "start"
                         else ": back in step")
