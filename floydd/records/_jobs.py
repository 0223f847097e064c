"""What a job record holds, and how its state may change.

::

    queued ──► starting ──► running ──► success | failed | stopped | timeout | lost
      │           │
      └───────────┴──► stopped | failed | lost        (never started)

Final states are final: a job that ended is re-run as a new job, never revived.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from floydd.errors import Conflict, InvalidName, InvalidSpec

__all__ = ["STATES", "FINAL_STATES", "TRANSITIONS", "COLUMNS", "check_project", "check_state",
           "check_transition", "encode_fields", "decode_row"]

STATES = ("queued", "starting", "running", "success", "failed", "stopped", "timeout", "lost")
FINAL_STATES = frozenset({"success", "failed", "stopped", "timeout", "lost"})
TRANSITIONS: Mapping[str, frozenset[str]] = {
    "queued": frozenset({"starting", "stopped", "failed", "lost"}),
    "starting": frozenset({"running", "stopped", "failed", "lost"}),
    "running": frozenset({"success", "failed", "stopped", "timeout", "lost"}),
    **{state: frozenset() for state in FINAL_STATES},
}

_STR = (str,)
_OPT_STR = (str, type(None))
_REAL = (int, float)
_OPT_REAL = (int, float, type(None))
_OPT_INT = (int, type(None))

# Settable job columns: name -> (accepted Python types, stored as JSON?). Order = dict order.
COLUMNS: Mapping[str, tuple[tuple[type, ...], bool]] = {
    "reason": (_STR, False),
    "command": (_STR, False),
    "params": ((dict,), True),
    "code_tree": (_OPT_STR, False),
    "data": ((list,), True),
    "resources": ((dict,), True),
    "gpus": ((list,), True),
    "env": (_STR, False),
    "message": (_STR, False),
    "mode": (_STR, False),
    "max_runtime": (_OPT_REAL, False),
    "created": (_REAL, False),
    "started": (_OPT_REAL, False),
    "ended": (_OPT_REAL, False),
    "exit_code": (_OPT_INT, False),
    "output_version": (_OPT_STR, False),
    "node": (_STR, False),
    "workspace": (_STR, False),
    "agent_pid": (_OPT_INT, False),
    "user": (_STR, False),
    "waiting_for": (_STR, False),
    "latest": ((dict, type(None)), True),
    "attempt": ((int,), False),
}
_JSON = frozenset(name for name, (_, as_json) in COLUMNS.items() if as_json)
_NOT_SETTABLE = {"id": "it is 'project/number'", "project": "a job never moves",
                 "number": "allocate_job numbers jobs", "state": "use set_state",
                 "log_offset": "use set_log_offset"}

# Same rule as floydd.jobs.spec.PROJECT_RE (the key "project/number" must stay parseable).
_PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def check_project(name: object) -> str:
    if not isinstance(name, str) or not _PROJECT_RE.match(name):
        raise InvalidName(f"{name!r} is not a valid project name",
                          hint="use 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit")
    return name


def check_state(state: object) -> str:
    if state not in TRANSITIONS:
        raise InvalidSpec(f"{state!r} is not a job state", hint=f"job states are: {', '.join(STATES)}")
    return state  # type: ignore[return-value]


def check_transition(key: str, old: str, new: str) -> None:
    if new in TRANSITIONS[old]:
        return
    if old in FINAL_STATES:
        hint = "a job that ended stays ended; run it again as a new job (floyd restart)"
    else:
        hint = f"from {old} a job can become: {', '.join(s for s in STATES if s in TRANSITIONS[old])}"
    raise Conflict(f"job {key} is {old}; it cannot become {new}", hint=hint)


def encode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and types of job fields; JSON-encode the JSON columns.

    An unknown or unsettable name, or a value of the wrong type, is a bug in the caller:
    it raises ``TypeError`` (as an unexpected keyword argument would).
    """
    out: dict[str, Any] = {}
    for name, value in fields.items():
        spec = COLUMNS.get(name)
        if spec is None:
            why = _NOT_SETTABLE.get(name, f"job fields are: {', '.join(COLUMNS)}")
            raise TypeError(f"job field {name!r} cannot be set here: {why}")
        types, as_json = spec
        if isinstance(value, bool) or not isinstance(value, types):
            raise TypeError(f"job field {name!r} must be {' or '.join(t.__name__ for t in types)}, "
                            f"not {type(value).__name__}")
        out[name] = json.dumps(value, separators=(",", ":")) if as_json and value is not None else value
    return out


def decode_row(columns: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    """A ``SELECT project, <COLUMNS...>`` row as the public job dict."""
    job = dict(zip(columns, row))
    for name in _JSON:
        if job[name] is not None:
            job[name] = json.loads(job[name])
    job["id"] = f"{job['project']}/{job['number']}"
    return job
