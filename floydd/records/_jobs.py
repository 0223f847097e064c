"""What a job record holds: its columns and how they are stored.

States and their moves are the job model's (:mod:`floydd.model`).
"""

from __future__ import annotations

import json
from typing import Any, Mapping


__all__ = ["COLUMNS", "encode_fields", "decode_row"]

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
    decoded = {name: json.loads(value) if name in _JSON and value is not None else value
               for name, value in zip(columns, row)}
    return {**decoded, "id": f"{row[columns.index('project')]}/{row[columns.index('number')]}"}
