"""What a request carries, read strictly: numbers in the query, the JSON body's shape, text fields.

Odd but well-formed input is the caller's mistake, never the daemon's: each reader here
answers it with a :class:`~floydd.errors.UserError` (a 400 that names the parameter and says
what to send) before it can reach a file offset, SQLite, msgpack or the raft log, where it
would have been a 500 or worse. In particular:

- numbers are ASCII digits (``int()`` and ``float()`` also take Arabic-Indic and other
  Unicode digits, and ``str.isdigit()`` takes superscripts that ``int()`` then refuses),
  finite, and within the bounds each parameter states (past 64 bits nothing fits);
- a JSON body holds only finite numbers that fit in 64 bits (``1e400`` decodes as infinity,
  ``NaN`` is not JSON), nests at most :data:`MAX_DEPTH` levels (``json.loads`` raises
  ``RecursionError`` on deep ones) and holds no lone surrogate (``"\\ud800"`` is valid
  JSON but not Unicode: it cannot be written as UTF-8 to the raft log or SQLite).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from floydd.errors import UserError

__all__ = ["MAX_DEPTH", "MAX_TEXT", "query_int", "query_float", "query_stale", "check_json", "too_deep", "text_field"]

MAX_DEPTH = 32
"""How deep a request body's objects and lists may nest (the API's own bodies nest 3 levels)."""
MAX_TEXT = 4096
"""The longest free text (a dataset version's message, an idempotency key) a request may carry."""


def query_stale(query: Mapping[str, str]) -> bool:
    """``stale=1``: read this node's copy of the cluster state as it is, instead of one at least
    as new as every committed write (works without a quorum)."""
    return query.get("stale") in ("1", "true", "yes")

_INT = re.compile(r"[0-9]{1,19}")
_FLOAT = re.compile(r"[+-]?([0-9]{1,20}(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")


def query_int(query: Mapping[str, str], name: str, default: int | None, *, minimum: int, maximum: int,
              hint: str) -> int | None:
    """Query parameter ``name`` as a whole number in ``[minimum, maximum]`` (``default`` if absent)."""
    raw = query.get(name)
    if raw is None:
        return default
    if not _INT.fullmatch(raw) or not minimum <= int(raw) <= maximum:
        raise UserError(f"{name} {raw[:40]!r} must be a whole number from {minimum} to {maximum}", hint=hint)
    return int(raw)


def query_float(query: Mapping[str, str], name: str, *, minimum: float, maximum: float, hint: str) -> float | None:
    """Query parameter ``name`` as a finite number in ``[minimum, maximum]``; None if absent or empty."""
    raw = query.get(name)
    if not raw:
        return None
    value = float(raw) if _FLOAT.fullmatch(raw) else math.nan
    if not minimum <= value <= maximum:          # NaN fails too
        raise UserError(f"{name} {raw[:40]!r} must be a number from {minimum:g} to {maximum:g}", hint=hint)
    return value


def check_json(data: Any) -> Any:
    """``data`` (a decoded JSON body) if it nests at most :data:`MAX_DEPTH` levels, all its text
    is valid Unicode and all its numbers are finite and fit in 64 bits; else a UserError.
    Iterative: a deep body cannot overflow the stack."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_unicode(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_number(value)
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise too_deep()
            if isinstance(value, dict):
                stack.extend((key, depth) for key in value)
                value = value.values()
            stack.extend((item, depth + 1) for item in value)
    return data


def too_deep() -> UserError:
    return UserError(f"request body nests deeper than {MAX_DEPTH} levels",
                     hint="send the flat object /v1/openapi.json describes")


def text_field(data: Mapping[str, Any], name: str, *, default: str = "", limit: int = MAX_TEXT,
               hint: str) -> str:
    """Field ``name`` of a JSON body (or a query) as text of at most ``limit`` characters
    (``default`` if absent or null)."""
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise UserError(f"{name} must be text, not {type(value).__name__}", hint=hint)
    if len(value) > limit:
        raise UserError(f"{name} is {len(value)} characters long; at most {limit} are allowed", hint=hint)
    return value


def _check_number(value: int | float) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError("request body holds a number too large for a float", hint="send finite numbers")
    if isinstance(value, int) and not -2**63 <= value < 2**63:
        raise UserError(f"request body holds a number of {len(str(abs(value)))} digits, past 64 bits",
                        hint="send numbers that fit in 64 bits (below 9223372036854775808)")


def _check_unicode(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(f"request body holds text that is not valid Unicode: a lone surrogate "
                        f"{text[exc.start]!r} at character {exc.start} of {text[:40]!r}",
                        hint="send UTF-8 text; a lone surrogate such as \\ud800 is not a character") from None
