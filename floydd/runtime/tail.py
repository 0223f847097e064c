"""Reading ``job.log`` from a byte offset: log lines and metric points.

Each line is ``<unix_ts> <o|e> <text>\\n`` (written by :mod:`floydd.agent.capture`).
A metric line is one whose text is a JSON object with a ``"metric"`` key (FloydHub's
format, the one :func:`floydd.agent.sdk.log` prints). It is either recorded or skipped,
never retried: recorded when ``"metric"`` is a name of 1 to :data:`MAX_NAME` characters,
``"value"`` a finite number and ``"step"`` absent or a whole number that fits the
records' 64-bit integers; skipped, and counted with why the first one was, otherwise
(not valid JSON, nested too deeply, a step past 64 bits, an infinite or NaN value, a
name too long, ...). Only complete lines are consumed; the returned offset points just
past the last newline read, so a caller resumes there.

Speed: the chunk is decoded and split once; only lines containing ``"metric"`` (a
C-level substring test) are parsed as JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["LogLine", "MetricPoint", "Scan", "Chunk", "read_chunk", "parse_lines", "parse_metrics",
           "scan_metrics", "MAX_NAME", "STEP_MIN", "STEP_MAX"]

CHUNK_BYTES = 1024 * 1024
"""Bytes of job.log read, parsed and recorded per step (about 12k metric lines, one
transaction). 8 MiB steps (~97k points per transaction) stalled for seconds on this
kind of VM and let recording fall behind; 1 MiB keeps pace with a job printing 200k
lines (bench/daemon_metrics.py)."""
_DECODER = json.JSONDecoder()
MAX_NAME = 200
"""Longest metric name kept (the records refuse longer ones)."""
STEP_MIN, STEP_MAX = -2**63, 2**63 - 1
"""The steps SQLite can store (its INTEGER is 64 bits); a step outside is skipped, not clamped:
a clamped step would put the point at the wrong place in its series."""
_EXCERPT = 120
"""How much of a skipped line its warning quotes."""


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: float
    stream: str  # "o" stdout, "e" stderr
    text: str


class MetricPoint(NamedTuple):
    """One metric point; as a tuple it is the ``(name, value, step, ts)`` row
    :meth:`Records.add_metrics` takes."""

    name: str
    value: float
    step: int | None
    ts: float


@dataclass(frozen=True, slots=True)
class Scan:
    """The metric lines of a chunk: the points recorded, and how many were skipped (why the
    first one was, quoting it)."""

    points: list[MetricPoint]
    skipped: int = 0
    first_skip: str = ""


@dataclass(frozen=True, slots=True)
class Chunk:
    data: bytes
    """The complete lines read (raw bytes)."""
    offset: int
    """Where the next read starts."""

    @property
    def lines(self) -> list[LogLine]:
        return parse_lines(self.data)

    @property
    def metrics(self) -> list[MetricPoint]:
        return parse_metrics(self.data)

    def scan(self) -> Scan:
        """The metric points of these lines and what was skipped."""
        return scan_metrics(self.data)


def read_chunk(path: Path, offset: int, *, limit: int = CHUNK_BYTES) -> Chunk:
    """The complete lines of ``path`` from ``offset`` (at most about ``limit`` bytes).

    A missing file reads as empty. A single line longer than ``limit`` is returned
    whole rather than never.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return Chunk(b"", offset)
    with f:
        f.seek(offset)
        data = f.read(limit)
        cut = data.rfind(b"\n")
        while cut < 0 and len(data) >= limit:  # a monster line: keep reading until it ends
            more = f.read(limit)
            if not more:
                break
            data += more
            cut = data.rfind(b"\n")
    if cut < 0:
        return Chunk(b"", offset)
    return Chunk(data[:cut + 1], offset + cut + 1)


def parse_metrics(data: bytes) -> list[MetricPoint]:
    """The metric points in ``data`` (complete job.log lines), in order."""
    return scan_metrics(data).points


def scan_metrics(data: bytes) -> Scan:
    """The metric points in ``data`` (complete job.log lines), in order, and the metric lines
    skipped. Never raises for what a job printed."""
    points: list[MetricPoint] = []
    append = points.append
    skipped, first = 0, ""
    for line in data.decode("utf-8", errors="replace").split("\n"):
        if '"metric"' not in line:  # C-speed filter: most log lines stop here
            continue
        sp = line.find(" ")
        if sp < 0 or line[sp + 2:sp + 3] != " ":
            continue
        body = line[sp + 3:].strip()
        if body[:1] != "{":
            continue
        point = _point(body, line[:sp])
        if type(point) is MetricPoint:
            append(point)
        elif point is not None:
            skipped += 1
            if not first:
                first = f"{point}: {body[:_EXCERPT]}{'…' if len(body) > _EXCERPT else ''}"
    return Scan(points, skipped, first)


def _point(body: str, stamp: str) -> MetricPoint | str | None:
    """The point of one metric-looking line; why it is skipped; or None: not a metric line."""
    try:
        obj, end = _DECODER.raw_decode(body)
    except RecursionError:
        return "nested too deeply"
    except ValueError:  # also integers of more digits than Python converts
        return "not valid JSON"
    if type(obj) is dict and "metric" not in obj:
        return None  # some other JSON that mentions "metric" in a value
    if end != len(body) or type(obj) is not dict:
        return "not a single JSON object"
    name, value, step = obj["metric"], obj.get("value"), obj.get("step")
    if type(name) is not str or not 0 < len(name) <= MAX_NAME:
        return f"the metric name is not a string of 1 to {MAX_NAME} characters"
    kind = type(value)
    if kind is int:
        try:
            value = float(value)
        except OverflowError:
            return "the value is too large for a float"
    elif kind is not float:  # also refuses bool, whose type is bool
        return f"the value is {'missing' if value is None else 'not a number'}"
    if not math.isfinite(value):
        return f"the value is {value}"
    if step is not None:
        if type(step) is float and step.is_integer():
            step = int(step)
        if type(step) is not int:
            return "the step is not a whole number"
        if not STEP_MIN <= step <= STEP_MAX:
            return "the step does not fit in 64 bits"
    try:
        ts = float(stamp)
    except ValueError:
        return "the line has no timestamp"
    if not math.isfinite(ts):
        return "the line has no timestamp"
    return MetricPoint(name, value, step, ts)


def parse_lines(data: bytes) -> list[LogLine]:
    """Every line of ``data`` (complete job.log lines); malformed ones keep their raw text."""
    lines: list[LogLine] = []
    text = data.decode("utf-8", errors="replace")
    for raw in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        ts, _, rest = raw.partition(" ")
        stream, _, body = rest.partition(" ")
        try:
            lines.append(LogLine(float(ts), stream, body))
        except ValueError:
            lines.append(LogLine(0.0, "o", raw))
    return lines
