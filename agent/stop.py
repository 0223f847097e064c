"""``WORKSPACE/stop``: why the daemon asks the agent to end its job, and as what.

The daemon writes it before it sends the agent SIGTERM; an agent that has not started the
job yet finds it and never starts it. It holds ``{"outcome": "stopped"|"failed",
"reason": "..."}``: ``failed`` when the daemon ends the job because something it needs
broke (the disk filled up), ``stopped`` for ``floyd stop``. A file of plain text (written
by an older daemon) is a ``stopped`` with that text as the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

from floydd.agent.status import atomic_write
from floydd.model import STOP_OUTCOMES

__all__ = ["STOP_FILE", "STOP_OUTCOMES", "write_stop", "read_stop"]

STOP_FILE = "stop"


def write_stop(ws: Path, reason: str, outcome: str = "stopped") -> None:
    """Ask the agent of ``ws`` to end its job as ``outcome`` (raises OSError: disk full, ...)."""
    if outcome not in STOP_OUTCOMES:
        raise ValueError(f"a stop ends a job as one of {STOP_OUTCOMES}, not {outcome!r}")
    atomic_write(Path(ws) / STOP_FILE, json.dumps({"outcome": outcome, "reason": reason or "stopped"}).encode())


def read_stop(ws: Path) -> tuple[str, str] | None:
    """``(outcome, reason)`` of the stop asked for ``ws``, or None when none was."""
    try:
        text = (Path(ws) / STOP_FILE).read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError:
        return ("stopped", "stopped")
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    if isinstance(raw, dict) and raw.get("outcome") in STOP_OUTCOMES:
        return raw["outcome"], str(raw.get("reason") or "stopped")
    return "stopped", text or "stopped"
