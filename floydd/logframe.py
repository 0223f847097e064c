"""The end of a streamed job log: how a reader tells "the log ended" from "the daemon died".

``GET /v1/jobs/P/N/logs`` answers the job's log bytes exactly as the log holds them. Its
``Floydd-Log-End`` header carries a token, fresh and random for each answer; after the last
log byte the daemon sends one end frame, the token, a space and a JSON object on one line::

    <token> {"result": {"offset": N}}\\n      the log ended (N: where a later read resumes)
    <token> {"error": {...}}\\n              the log stopped early, and why (the box that runs
                                             the job went away, ...)

A job never sees the token, so nothing it prints can pass for the end frame; an answer that
stops without the frame was cut short (the daemon died or the connection broke). When the log's
last line has no newline, the frame follows it on the same line: the reader splits it off.
Pure and light: the daemon (:mod:`floydd.api.jobs`) writes frames, :mod:`floydd.client` reads them.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Generator, Iterable

__all__ = ["HEADER", "new_token", "frame", "unframe"]

HEADER = "Floydd-Log-End"
"""The response header that carries the answer's end token."""


def new_token() -> str:
    """A token for one answer: 128 random bits, as hex."""
    return secrets.token_hex(16)


def frame(token: str, end: dict[str, Any]) -> bytes:
    """The end frame closing an answer: ``end`` is ``{"result": ...}`` or ``{"error": ...}``."""
    return f"{token} {json.dumps(end, allow_nan=False)}\n".encode()


def unframe(lines: Iterable[bytes], token: str) -> Generator[bytes, None, dict[str, Any] | None]:
    """Yield the log bytes of ``lines`` (an answer read line by line); return the end frame's
    object, or None when the answer stopped without one (it was cut short)."""
    mark = token.encode() + b" "
    for line in lines:
        at = line.find(mark)
        if at < 0:
            yield line
            continue
        if at:
            yield line[:at]                 # the log's last line had no newline
        try:
            end = json.loads(line[at + len(mark):])
        except ValueError:
            return None                     # the frame itself was cut
        return end if isinstance(end, dict) else None
    return None
