"""The job's stdout/stderr bytes -> ``job.log`` lines ``<unix_ts> <o|e> <text>\\n``.

Cheap by construction: the supervisor hands over whole read bursts (up to 64 KiB per
``os.read``), each burst gets one timestamp, lines are prefixed with one C-level
``bytes.replace`` and everything collected in a burst goes out in one ``os.write``.
A line still missing its newline waits for the next burst; at exit it is written with
a newline added. A line that never ends (a progress bar redrawn with ``\\r``) is cut
every ``MAX_PARTIAL`` bytes so memory stays bounded.
"""

from __future__ import annotations

import os

__all__ = ["LogWriter", "MAX_PARTIAL"]

MAX_PARTIAL = 64 * 1024


class LogWriter:
    """Formats bursts per stream (``b"o"`` / ``b"e"``) and appends them to an open fd."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._partial: dict[bytes, bytes] = {b"o": b"", b"e": b""}
        self._out: list[bytes] = []

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
        prefix = b"%.6f %s " % (ts, stream)
        self._out.append(prefix + buf[:cut].replace(b"\n", b"\n" + prefix) + b"\n")

    def flush_partial(self, ts: float) -> None:
        """Queue the unfinished last line of each stream (at exit)."""
        for stream, rest in self._partial.items():
            if rest:
                self._out.append(b"%.6f %s " % (ts, stream) + rest + b"\n")
                self._partial[stream] = b""

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
