"""When Python's cycle collector runs in ``floyd top``: between polls, not in the middle of a draw.

At 256 boxes × 10,000 jobs each poll leaves a snapshot of thousands of objects that lives about
a second, long enough to reach the oldest generation; so the collector's full pass (every
object of the app: Textual, its widgets, the modules, about 120,000) came every second or two
and took 40–85 ms, and when it fell in a draw that draw took 100–140 ms (issue 23: the worst
renders). :class:`GcPacing`:

* after the second poll (the app has drawn its first snapshot), collects and freezes what exists then
  (:func:`gc.freeze`: the modules, Textual, the screens), so a full pass walks only what
  came later (tens of thousands of objects, 3× less);
* turns the collector's own full passes off (young generations still run as usual) and makes
  one itself every :data:`FULL_EVERY` polls, on the poller thread, after the poll and before
  the snapshot is handed over, when the screen has nothing to draw.

Garbage with cycles (Textual's strip caches: ~500 objects a poll) waits at most that many
polls. :meth:`GcPacing.stop` puts the collector back as it was (tests run many apps in one
process).
"""

from __future__ import annotations

import gc

__all__ = ["GcPacing", "FULL_EVERY"]

FULL_EVERY = 5
"""Polls between two full passes of the collector."""


class GcPacing:
    def __init__(self, every: int = FULL_EVERY) -> None:
        self.every = every
        self.started = False
        self._threshold: tuple[int, int, int] | None = None
        self._polls = 0

    def after_poll(self) -> None:
        """Called on the poller thread after each poll, before its snapshot is handed over."""
        self._polls += 1
        if not self.started:
            if self._polls >= 2:
                self._start()
        elif self._polls % self.every == 0:
            gc.collect()

    def _start(self) -> None:
        """The app is up: freeze what exists, pace the full passes."""
        self.started = True
        gc.collect()
        gc.freeze()
        self._threshold = gc.get_threshold()
        young, middle, _ = self._threshold
        gc.set_threshold(young, middle, 1 << 30)    # no full pass of the collector's own

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self._threshold is not None:
            gc.set_threshold(*self._threshold)
        gc.unfreeze()
