"""The in-job SDK: report metrics the way FloydHub jobs do.

    from floydd.agent.sdk import log
    log("loss", 0.31, step=120)   # prints {"metric": "loss", "value": 0.31, "step": 120}

The line goes to stdout and is flushed at once; the node tails it into the job's
records. Any program can print the same JSON line itself. This module runs inside
jobs, so it imports only the standard library's json, math and numbers.
"""

from __future__ import annotations

import json
import math
import numbers
import sys

__all__ = ["log", "metric_line", "MAX_NAME", "STEP_MIN", "STEP_MAX"]

MAX_NAME = 200
"""Longest metric name the node records (as :data:`floydd.runtime.tail.MAX_NAME`)."""
STEP_MIN, STEP_MAX = -2**63, 2**63 - 1
"""The steps the node's records can hold (64-bit integers)."""


def log(name: str, value: float, step: int | None = None) -> None:
    """Print one metric point to stdout and flush.

    ``name`` a string of 1 to :data:`MAX_NAME` characters, ``value`` a finite real number
    (int, float, numpy scalar; not bool), ``step`` None or a whole number that fits in 64
    bits: what the node records. Raises TypeError / ValueError otherwise (the node would
    skip the line).
    """
    line = metric_line(name, value, step)
    out = sys.stdout
    out.write(line + "\n")
    out.flush()


def metric_line(name: str, value: float, step: int | None = None) -> str:
    """The JSON text :func:`log` prints (without the newline)."""
    if not isinstance(name, str):
        raise TypeError(f"metric name must be a string, not {type(name).__name__}")
    if not name.strip():
        raise ValueError("metric name is empty")
    if len(name) > MAX_NAME:
        raise ValueError(f"metric name {name[:40]!r}... is longer than {MAX_NAME} characters")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"metric {name!r}: value must be a number, not {type(value).__name__} ({value!r})")
    value = int(value) if isinstance(value, numbers.Integral) else float(value)
    try:
        finite = math.isfinite(value)
    except OverflowError:
        raise ValueError(f"metric {name!r}: value {str(value)[:20]}... is too large for a float") from None
    if not finite:
        raise ValueError(f"metric {name!r}: value must be finite, not {value}")
    point: dict = {"metric": name, "value": value}
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"metric {name!r}: step must be a whole number, not {type(step).__name__} ({step!r})")
        step = int(step)
        if not STEP_MIN <= step <= STEP_MAX:
            raise ValueError(f"metric {name!r}: step {step} does not fit in 64 bits")
        point["step"] = step
    return json.dumps(point)
