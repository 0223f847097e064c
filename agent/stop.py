"""``WORKSPACE/stop``: why the daemon asks the agent to end its job, and as what.

The daemon writes it before it sends the agent SIGTERM; an agent that has not started the
job yet finds it and never starts it. It holds ``{"outcome": "stopped"|"failed",
"reason": "..."}``: ``failed`` when the daemon ends the job because something it needs
broke (the disk filled up), ``stopped`` for ``floyd stop``. A file of plain text (written
by an older daemon) is a ``stopped`` with that text as the reason.

A stop for a full disk also says ``"log": false``: the agent writes nothing more to
``job.log`` (the space the daemon frees to record the job's end is not for the job's last
lines, which a flooding job would take before it was recorded).
"""

from __future__ import annotations

import json
from pathlib import Path

from floydd.agent.status import atomic_write
from floydd.model import STOP_OUTCOMES

__all__ = ["STOP_FILE", "STOP_OUTCOMES", "write_stop", "read_stop", "keeps_log"]

STOP_FILE = "stop"


def write_stop(ws: Path, reason: str, outcome: str = "stopped", *, keep_log: bool = True) -> None:
    """Ask the agent of ``ws`` to end its job as ``outcome``; ``keep_log=False``: and to write
    nothing more to its log (raises OSError: disk full, ...)."""
    if outcome not in STOP_OUTCOMES:
        raise ValueError(f"a stop ends a job as one of {STOP_OUTCOMES}, not {outcome!r}")
    doc = {"outcome": outcome, "reason": reason or "stopped", **({} if keep_log else {"log": False})}
    atomic_write(Path(ws) / STOP_FILE, json.dumps(doc).encode())


def read_stop(ws: Path) -> tuple[str, str] | None:
    """``(outcome, reason)`` of the stop asked for ``ws``, or None when none was."""
    raw, text = _read(ws)
    if raw is None and text is None:
        return None
    if isinstance(raw, dict) and raw.get("outcome") in STOP_OUTCOMES:
        return raw["outcome"], str(raw.get("reason") or "stopped")
    return "stopped", text or "stopped"


def keeps_log(ws: Path) -> bool:
    """Whether the agent of ``ws`` may still write its log (False: a stop for a full disk)."""
    raw, _text = _read(ws)
    return not (isinstance(raw, dict) and raw.get("log") is False)


def _read(ws: Path) -> tuple[object, str | None]:
    """(the stop file's JSON or None, its text; None when there is no file)."""
    try:
        text = (Path(ws) / STOP_FILE).read_text(errors="replace").strip()
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, ""
    try:
        return json.loads(text), text
    except ValueError:
        return None, text
