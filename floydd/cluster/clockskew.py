"""Each box's wall-clock offset from the leader's, measured as NTP does (issue 21, "Time").

No decision of the cluster reads a wall clock another box wrote (liveness is measured on
each box's monotonic clock: :mod:`floydd.cluster.heard`), but people read times in job
histories, logs and certificates, and a certificate a box 10 minutes behind has not reached
yet fails TLS. So each box measures how far its clock is from the leader's and says so in
its heartbeat (``node.health`` ``clock``, from level 3); ``floyd nodes``, ``floydd members``
and ``floydd status`` show it and flag a box more than ``max_clock_skew`` away.

One measurement, before each heartbeat (the leader answers the read ``clock`` from its
memory, :meth:`RaftDriver.serve <floydd.cluster.driver.reads.Reads.serve>`)::

    box:    t0 = its clock, asks the leader
    leader: t1 = its clock, answers
    box:    t3 = its clock on the answer
    offset = t1 - (t0 + t3) / 2      (the box's clock is ``-offset`` from the leader's)
    rtt    = t3 - t0                 (the offset is within ``rtt / 2`` of the truth)

An offset is the leader's clock minus the box's: positive when the box runs behind.
:func:`measure`, :func:`skewed` and :class:`Episodes` are pure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QUERY", "ClockReading", "measure", "skewed", "describe", "Episodes"]

QUERY = "clock"
"""The named read the leader answers with its wall clock (``{"now": seconds}``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockReading:
    """One box's clock against the leader's: ``offset`` (leader minus box, seconds) and the
    round trip it was measured over (its error is at most half of it)."""

    offset: float
    rtt: float

    def wire(self) -> dict:
        return {"offset": round(self.offset, 4), "rtt": round(self.rtt, 4)}

    @classmethod
    def from_wire(cls, raw: object) -> ClockReading | None:
        """The reading a heartbeat carried, or None (none yet, or not one this reads)."""
        if not isinstance(raw, dict):
            return None
        offset, rtt = raw.get("offset"), raw.get("rtt")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (offset, rtt)):
            return None
        return cls(offset=float(offset), rtt=float(rtt))


def measure(sent: float, leader_now: float, received: float) -> ClockReading:
    """The reading from one question (``sent``, ``received``: the box's clock; ``leader_now``:
    the leader's answer)."""
    return ClockReading(offset=leader_now - (sent + received) / 2, rtt=max(0.0, received - sent))


def skewed(reading: ClockReading | None, limit: float) -> bool:
    """Is a box with this reading more than ``limit`` seconds from the leader (beyond what the
    round trip leaves uncertain)?"""
    return reading is not None and abs(reading.offset) - reading.rtt / 2 > limit


def describe(reading: ClockReading | None) -> str:
    """``"10.0 min ahead of the leader"``, ``"3s behind the leader"``, ``"in step with the
    leader"`` (within a second), or ``""`` (not measured)."""
    if reading is None:
        return ""
    ahead = -reading.offset
    if abs(ahead) < 1.0:
        return "in step with the leader"
    size = f"{abs(ahead):.0f}s" if abs(ahead) < 120 else f"{abs(ahead) / 60:.1f} min"
    return f"{size} {'ahead of' if ahead > 0 else 'behind'} the leader"


class Episodes:
    """Which boxes are skewed now, so a skew is logged once when it starts and once when it
    ends (not with every heartbeat). :meth:`see` answers what to log, if anything."""

    def __init__(self) -> None:
        self._skewed: set[str] = set()

    def see(self, node: str, reading: ClockReading | None, limit: float) -> str | None:
        """``"start"`` when ``node`` has just gone past ``limit``, ``"end"`` when it is back
        within it, else None."""
        now = skewed(reading, limit)
        was = node in self._skewed
        if now and not was:
            self._skewed.add(node)
            return "start"
        if was and not now and reading is not None:
            self._skewed.discard(node)
            return "end"
        return None
