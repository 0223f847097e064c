"""The background scrub: every object of a store re-read from the medium and checked, slowly.

``verify`` (:mod:`floydd.store.care.maintenance`) reads everything at once, when asked. The scrub
spreads the same check (read past the page cache, authenticate, re-hash) over days: it
walks the objects in id order, one slice of the id space (its first byte, 256 slices) at a
time, and each :meth:`Scrub.step` checks objects for about the bytes its caller allows, so
the caller sets the rate (the daemon's ``store_scrub_rate``: floydd.cluster.replication.storecare
drives it and repairs what it finds from a good holder). Where the pass is lives in
``scrub.json`` beside the store, written at most every ``save_every`` seconds and at the
end of each slice, so a restart goes on from there (re-checking a few seconds of work at
most). A pass starts at most once every ``every`` seconds (``store_scrub_every``),
counted from the start of the one before::

    scrub.json  {"pass": N, "started": ts, "after": last id checked (hex, "" at the start),
                 "objects": n, "bytes": n, "damaged": n,
                 "last": the previous pass: {"pass", "started", "ended", "objects", "bytes", "damaged"}}

Each step holds the store's shared lock (gc waits at most one step); an object gc removed
meanwhile is skipped. Objects written during a pass are checked if their id comes after
the cursor, else by the next pass (they were checked when written).
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from floydd import log
from floydd.store.ids import ObjectId

__all__ = ["Scrub", "ScrubState", "StepResult", "SCRUB_FILE"]

SCRUB_FILE = "scrub.json"
_SLICES = [f"{i:02x}" for i in range(256)]


@dataclass(slots=True, kw_only=True)
class ScrubState:
    """Where the scrub is (``scrub.json``); ``started`` 0: no pass begun yet."""

    pass_: int = 0
    started: float = 0.0
    after: str = ""
    objects: int = 0
    bytes: int = 0
    damaged: int = 0
    last: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["pass"] = out.pop("pass_")
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> ScrubState:
        """The state in ``raw``; a fresh one if any field has the wrong type (a damaged file)."""
        raw = dict(raw)
        raw["pass_"] = raw.pop("pass", 0)
        fresh = cls()
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        for k, v in known.items():
            default = getattr(fresh, k)
            if isinstance(v, bool) or not isinstance(v, (float, int) if isinstance(default, float) else type(default)):
                return fresh
        return cls(**known)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    checked_objects: int
    checked_bytes: int
    damaged: tuple[tuple[ObjectId, str], ...]
    pass_ended: bool


class Scrub:
    """One store's scrub; not thread-safe (one driver calls ``step`` in a worker thread)."""

    def __init__(self, store, *, every: float, save_every: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.path = Path(store.root) / SCRUB_FILE
        self.every = every
        self._save_every = save_every
        self._clock = clock
        self.state = _load(self.path)
        self._saved = 0.0
        self._slice: tuple[str, list[ObjectId]] | None = None   # the slice being walked, the next id last

    def due(self) -> float:
        """Seconds until there is work: 0 in a pass, else until the next pass may start."""
        if self.state.started:
            return 0.0
        previous = self.state.last.get("started", 0.0)
        return max(0.0, previous + self.every - self._clock()) if previous else 0.0

    def step(self, budget: int) -> StepResult:
        """Check objects after the cursor until ``budget`` bytes are read (at least one
        object), starting a pass if none is running; saves the cursor when it is time."""
        state = self.state
        if not state.started:
            state.pass_, state.started = state.pass_ + 1, self._clock()
            state.after, state.objects, state.bytes, state.damaged = "", 0, 0, 0
            log.store.info("scrub: pass %d begins", state.pass_)
        checked = read = 0
        damaged: list[tuple[ObjectId, str]] = []
        ended = False
        with self.store.holding():
            while read < max(1, budget):
                oid = self._next()
                if oid is None:
                    ended = True
                    break
                size, problem = self.store.check_object(oid)
                state.after = oid.hex
                checked, read = checked + 1, read + size
                if problem:
                    damaged.append((oid, problem))
                    log.store.error("scrub: object %s: %s", oid.short, problem)
        state.objects += checked
        state.bytes += read
        state.damaged += len(damaged)
        if ended:
            state.last = {"pass": state.pass_, "started": state.started, "ended": self._clock(),
                          "objects": state.objects, "bytes": state.bytes, "damaged": state.damaged}
            state.started, state.after = 0.0, ""
            log.store.info("scrub: pass %d checked %d objects (%d bytes), %d damaged", state.pass_,
                           state.objects, state.bytes, state.damaged)
        if ended or self._clock() - self._saved >= self._save_every or (self._slice and not self._slice[1]):
            self.save()
        return StepResult(checked_objects=checked, checked_bytes=read, damaged=tuple(damaged), pass_ended=ended)

    def save(self) -> None:
        """Write ``scrub.json`` (atomically: a torn write leaves the previous one)."""
        tmp = self.path.with_name(f".{SCRUB_FILE}.tmp")
        tmp.write_text(json.dumps(self.state.to_dict()))
        os.replace(tmp, self.path)
        self._saved = self._clock()

    def _next(self) -> ObjectId | None:
        """The first object after the cursor, listing one slice at a time; None past the last."""
        after = self.state.after
        prefix = after[:2] or _SLICES[0]
        while True:
            if self._slice is None or self._slice[0] != prefix:
                ids = sorted(self.store.backend.list(prefix))
                ids = ids[bisect_right([o.hex for o in ids], after):] if after else ids
                self._slice = (prefix, ids[::-1])
            ids = self._slice[1]
            while ids:
                oid = ids.pop()
                if oid.hex > after:
                    return oid
            index = _SLICES.index(prefix) + 1
            if index == len(_SLICES):
                self._slice = None
                return None
            prefix, after = _SLICES[index], ""


def _load(path: Path) -> ScrubState:
    try:
        raw = json.loads(path.read_text())
        return ScrubState.from_dict(raw) if isinstance(raw, dict) else ScrubState()
    except (OSError, ValueError, TypeError):
        return ScrubState()     # no file, or a damaged one: start a pass from the beginning
