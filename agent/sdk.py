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

__all__ = ["log", "metric_line"]


def log(name: str, value: float, step: int | None = None) -> None:
    """Print one metric point to stdout and flush.

    ``value`` must be a finite real number (int, float, numpy scalar; not bool),
    ``step`` None or a whole number. Raises TypeError / ValueError otherwise.
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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"metric {name!r}: value must be a number, not {type(value).__name__} ({value!r})")
    value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not math.isfinite(value):
        raise ValueError(f"metric {name!r}: value must be finite, not {value}")
    point: dict = {"metric": name, "value": value}
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"metric {name!r}: step must be a whole number, not {type(step).__name__} ({step!r})")
        point["step"] = int(step)
    return json.dumps(point)
