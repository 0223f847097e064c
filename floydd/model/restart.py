"""Restart policies: what becomes of a run that fails or is lost (``--restart``,
``--max-attempts``, ``--lost-after``), and the durations they are written in."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from floydd.errors import InvalidSpec
from floydd.model.defaults import DEFAULT_MAX_ATTEMPTS, DEFAULT_RESTART
from floydd.model.resources import _whole

__all__ = ["RESTART_POLICIES", "MAX_ATTEMPTS", "MAX_LOST_AFTER", "RestartPolicy", "parse_duration"]

RESTART_POLICIES = ("never", "on-failure", "on-lost")
"""``--restart``: ``never`` rerun; rerun a run that ``failed`` or was ``lost`` (``on-failure``);
rerun only a run ``lost`` with its box (``on-lost``, the default: a bug does not rerun, an
outage does)."""
MAX_ATTEMPTS = 100
MAX_LOST_AFTER = 30 * 24 * 3600.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)?", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: object, flag: str = "--lost-after") -> float:
    """``90``, ``90s``, ``5m``, ``2h``, ``1d`` (or a number of seconds) -> seconds, above 0
    and at most 30 days."""
    hint = f"write a duration such as {flag} 90s, 5m or 2h"
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidSpec(f"{flag} {text!r:.40} is not a duration", hint=hint)
        seconds = float(match.group(1)) * _SECONDS[(match.group(2) or "").lower()]
    if not 0 < seconds <= MAX_LOST_AFTER:
        raise InvalidSpec(f"{flag} {text!r:.40} must be above 0 and at most 30 days", hint=hint)
    return seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartPolicy:
    """What happens to a run that fails or is lost (``floyd run --restart ... --max-attempts N
    --lost-after DURATION``), part of the job's spec.

    A rerun is the same job with a new attempt, placed anew (a gang whole), and its
    ``/output`` starts as the last attempt's: the convention for checkpoints is to write them
    into ``/output`` (atomically: a temporary name, then a rename) and to look there first at
    start. ``max_attempts`` counts the runs (the first and its reruns; a placement given up
    before the job started is not a run). ``lost_after``: how long the job's box may be out
    of touch (the job ``unknown``) before the run is declared lost; None: the cluster's
    ``job_lost_after``, :data:`~floydd.model.defaults.DEFAULT_LOST_AFTER` unless set."""

    policy: str = DEFAULT_RESTART
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lost_after: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in RESTART_POLICIES:
            raise InvalidSpec(f"--restart {self.policy!r:.40} is not a restart policy",
                              hint=f"use one of {', '.join(RESTART_POLICIES)}")
        _whole(self.max_attempts, "--max-attempts", 1)
        if self.max_attempts > MAX_ATTEMPTS:
            raise InvalidSpec(f"--max-attempts {self.max_attempts} is more than {MAX_ATTEMPTS}",
                              hint=f"use at most --max-attempts {MAX_ATTEMPTS}")
        if self.lost_after is not None:
            parse_duration(self.lost_after)

    def reruns(self, state: str) -> bool:
        """Whether a run that ended ``state`` is run again (attempts left aside)."""
        if self.policy == "on-failure":
            return state in ("failed", "lost")
        return self.policy == "on-lost" and state == "lost"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> RestartPolicy:
        """From the stored form; a spec stored before restart policies has none: the default."""
        raw = raw or {}
        return cls(policy=raw.get("policy") or DEFAULT_RESTART,
                   max_attempts=raw.get("max_attempts") or DEFAULT_MAX_ATTEMPTS, lost_after=raw.get("lost_after"))

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "max_attempts": self.max_attempts, "lost_after": self.lost_after}
