"""The job's stdout/stderr bytes -> ``job.log`` lines ``<unix_ts> <o|e> <text>\\n``.

Cheap by construction: the supervisor hands over whole read bursts (up to 64 KiB per
``os.read``), each burst gets one timestamp, lines are prefixed with one C-level
``bytes.replace`` and everything collected in a burst goes out in one ``os.write``.
A line still missing its newline waits for the next burst; at exit it is written with
a newline added. A line that never ends (a progress bar redrawn with ``\\r``) is cut
every ``MAX_PARTIAL`` bytes so memory stays bounded.

The cap (``max_log_mb``): ``job.log`` grows to at most ``cap`` bytes (what was in it when
the agent opened it, e.g. an environment build's lines, included). The line that would pass
it and every later one are dropped and counted (lines, bytes of the job's output); a note
says so in the log the moment it happens, and :meth:`LogWriter.finish` ends the log with the
count. Dropping costs two C-level calls a burst (``count``, ``len``), so a job printing
millions of lines a second costs the agent little and the daemon nothing. Of the metric
lines dropped, the last of each metric (the newest :data:`LOOK_BACK` metric lines of each
burst are looked at; at most :data:`KEEP_METRICS` metrics, lines up to
:data:`KEEP_LINE` bytes) is kept and written at the end, before the count, so the job's
final metric values are right however much it printed; the series itself stops at the cap.
"""

from __future__ import annotations

import os
import re

from floydd.model import format_size

__all__ = ["LogWriter", "MAX_PARTIAL", "KEEP_METRICS", "KEEP_LINE", "LOOK_BACK"]

MAX_PARTIAL = 64 * 1024
KEEP_METRICS = 100
"""Metrics whose last line past the cap is kept (the others' are dropped with the rest)."""
KEEP_LINE = 1024
"""Longest metric line kept past the cap."""
LOOK_BACK = 64
"""Metric lines looked at, newest first, in each burst read past the cap."""
_NAME = re.compile(rb'"metric"\s*:\s*"((?:[^"\\\n]|\\.){1,200})"')


class LogWriter:
    """Formats bursts per stream (``b"o"`` / ``b"e"``) and appends them to an open fd, up to
    ``cap`` bytes (None: no cap; see the module docstring)."""

    def __init__(self, fd: int, cap: int | None = None) -> None:
        self._fd = fd
        self._partial: dict[bytes, bytes] = {b"o": b"", b"e": b""}
        self._out: list[bytes] = []
        self._cap = cap
        self._size = os.fstat(fd).st_size        # bytes in the log and queued
        self._capped = False
        self.dropped_lines = 0
        self.dropped_bytes = 0
        """Lines and bytes of the job's output dropped past the cap."""
        self._kept: dict[bytes, tuple[bytes, float, bytes]] = {}   # metric name -> (stream, ts, line)

    @property
    def capped(self) -> bool:
        """Whether the log reached its cap (later lines are dropped)."""
        return self._capped

    def add(self, stream: bytes, data: bytes, ts: float) -> None:
        """Queue the complete lines of ``data`` (read from ``stream`` at ``ts``)."""
        buf = self._partial[stream] + data if self._partial[stream] else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) < MAX_PARTIAL:
                self._partial[stream] = buf
                return
            cut = len(buf)
            rest = b""
        else:
            rest = buf[cut + 1:]
        self._partial[stream] = rest
        lines = buf[:cut]
        if self._capped:
            self._drop(stream, lines, ts)
            return
        prefix = b"%.6f %s " % (ts, stream)
        piece = prefix + lines.replace(b"\n", b"\n" + prefix) + b"\n"
        if self._cap is not None and self._size + len(piece) > self._cap:
            self._reach_cap(stream, lines, piece, len(prefix), ts)
            return
        self._size += len(piece)
        self._out.append(piece)

    def flush_partial(self, ts: float) -> None:
        """Queue the unfinished last line of each stream (at exit)."""
        for stream, rest in self._partial.items():
            if rest:
                self._partial[stream] = b""
                if self._capped:
                    self._drop(stream, rest, ts)
                else:
                    self.add(stream, rest + b"\n", ts)

    def finish(self, ts: float) -> None:
        """Queue the end of a capped log (at exit, after :meth:`flush_partial`): the last line
        of each metric dropped, then how much was dropped."""
        if not self._capped:
            return
        for stream, when, line in self._kept.values():
            self._out.append(b"%.6f %s " % (when, stream) + line + b"\n")
        self._kept.clear()
        self._note(ts, f"floydd: {self.dropped_lines:,} lines ({format_size(self.dropped_bytes)}) dropped: "
                       f"the job's log reached its {format_size(self._cap or 0)} cap (max_log_mb)")

    def drop(self) -> None:
        """Forget what is queued (it could not be written: the disk is full)."""
        self._out.clear()

    def write(self) -> None:
        """Append what is queued to the log in one write (what was written stays written
        when it raises: the rest stays queued)."""
        if not self._out:
            return
        data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
        self._out.clear()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            self._out.append(bytes(view))
            raise

    # -- past the cap ------------------------------------------------------------------------

    def _reach_cap(self, stream: bytes, lines: bytes, piece: bytes, prefix: int, ts: float) -> None:
        """Queue the whole lines of ``piece`` (``lines``, each with a ``prefix``-byte stamp) that
        fit under the cap; drop the others."""
        room = max(0, (self._cap or 0) - self._size)
        end = piece.rfind(b"\n", 0, room) + 1          # 0: not even one line fits
        if end:
            self._out.append(piece[:end])
            self._size += end
        self._capped = True
        self._note(ts, f"floydd: the job's log reached its {format_size(self._cap or 0)} cap (max_log_mb); "
                       "later lines are dropped and counted")
        if end < len(piece):
            self._drop(stream, lines[end - piece.count(b"\n", 0, end) * prefix:], ts)

    def _drop(self, stream: bytes, lines: bytes, ts: float) -> None:
        """Count ``lines`` (complete lines, the last one's newline left off) as dropped and
        keep the newest metric lines among them (see the module docstring)."""
        self.dropped_lines += lines.count(b"\n") + 1
        self.dropped_bytes += len(lines) + 1
        seen: set[bytes] = set()
        end = len(lines)
        for _ in range(LOOK_BACK):
            at = lines.rfind(b'"metric"', 0, end)
            if at < 0:
                return
            start = lines.rfind(b"\n", 0, at) + 1
            stop = lines.find(b"\n", at)
            line = lines[start:len(lines) if stop < 0 else stop]
            end = start
            found = _NAME.search(line) if len(line) <= KEEP_LINE else None
            if found is not None and found.group(1) not in seen:
                seen.add(found.group(1))          # the newest line of this name in this burst
                if found.group(1) in self._kept or len(self._kept) < KEEP_METRICS:
                    self._kept[found.group(1)] = (stream, ts, line)
            if start == 0:
                return

    def _note(self, ts: float, text: str) -> None:
        self._out.append(b"%.6f e " % ts + text.encode() + b"\n")
