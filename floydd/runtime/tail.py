"""Reading ``job.log`` from a byte offset: log lines and metric points.

Each line is ``<unix_ts> <o|e> <text>\\n`` (written by :mod:`floydd.agent.capture`).
A metric is a line whose text is a JSON object with a string ``"metric"``, a finite
numeric ``"value"`` and optionally a whole-number ``"step"`` (FloydHub's format, the
one :func:`floydd.agent.sdk.log` prints). Only complete lines are consumed; the
returned offset points just past the last newline read, so a caller resumes there.

Speed: the chunk is decoded and split once; only lines containing ``"metric"`` (a
C-level substring test) are parsed as JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["LogLine", "MetricPoint", "Chunk", "read_chunk", "parse_lines", "parse_metrics"]

CHUNK_BYTES = 1024 * 1024
"""Bytes of job.log read, parsed and recorded per step (about 12k metric lines, one
transaction). 8 MiB steps (~97k points per transaction) stalled for seconds on this
kind of VM and let recording fall behind; 1 MiB keeps pace with a job printing 200k
lines (bench/daemon_metrics.py)."""
_DECODER = json.JSONDecoder()
MAX_NAME = 200
"""Longest metric name kept (the records refuse longer ones)."""


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
    points: list[MetricPoint] = []
    append = points.append
    decode = _DECODER.raw_decode
    isfinite = math.isfinite
    for line in data.decode("utf-8", errors="replace").split("\n"):
        if '"metric"' not in line:  # C-speed filter: most log lines stop here
            continue
        sp = line.find(" ")
        if sp < 0 or line[sp + 2:sp + 3] != " ":
            continue
        body = line[sp + 3:].strip()
        if body[:1] != "{":
            continue
        try:
            obj, end = decode(body)
            ts = float(line[:sp])
        except ValueError:
            continue
        if end != len(body) or type(obj) is not dict:
            continue
        name, value, step = obj.get("metric"), obj.get("value"), obj.get("step")
        if type(name) is not str or not 0 < len(name) <= MAX_NAME:
            continue
        kind = type(value)
        if kind is int:
            try:
                value = float(value)
            except OverflowError:
                continue
        elif kind is not float:
            continue  # also rejects bool, whose type is bool
        if not isfinite(value):
            continue
        if step is not None and type(step) is not int:
            if type(step) is float and step.is_integer():
                step = int(step)
            else:
                continue
        append(MetricPoint(name, value, step, ts))
    return points


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
