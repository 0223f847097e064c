"""Every error answer."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ErrorDetail", "Error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorDetail:
    """What went wrong (``message``), what to do (``hint``), a stable ``code`` and the
    :mod:`floydd.errors` class (``kind``) the client raises again."""

    code: str
    message: str
    hint: str = ""
    kind: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """Every error answer, with the matching HTTP status."""

    error: ErrorDetail
