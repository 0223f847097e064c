"""The daemon's answers as the client reads them: a job answer into :class:`floydd.model.JobView`.

``floyd`` and ``floyd top`` decode a job answer once, where it arrives, and use attributes
after that (``--json`` prints the answer itself). A ``floyd`` may talk to a daemon of another
release (an upgrade goes box by box), so the decode is lenient: a field the daemon did not
send gets the empty value of its type (``""``, ``0``, None, ``{}``, ``()``; a closed set's
first value), except the four a job is nothing without (``id``, ``project``, ``number``,
``state``); fields this release does not know are ignored. What cannot be read is an
:class:`~floydd.errors.InternalError` that says so, never a traceback. An answer of this
release is converted by msgspec alone; the filling is only for one that lacks fields.

msgspec and the view types are loaded when a job is read, not with this module: ``floyd --help``
does not load them.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

from floydd.errors import InternalError

if TYPE_CHECKING:
    from floydd.model import JobView

__all__ = ["decode_job", "decode_jobs"]


def decode_job(answer: object) -> JobView:
    """A job answer of the daemon (its JSON, decoded) as a :class:`JobView`, leniently (see the
    module's docstring); an answer that is no job raises :class:`~floydd.errors.InternalError`."""
    import msgspec

    from floydd.model import JobView

    if not isinstance(answer, dict):
        raise _malformed(f"a job is a JSON object, not {type(answer).__name__}")
    missing = sorted(_ESSENTIAL - answer.keys())
    if missing:
        raise _malformed(f"a job without {', '.join(missing)}")
    try:
        return msgspec.convert(answer, JobView)     # a daemon of this release: all there
    except msgspec.ValidationError:
        pass
    try:
        return msgspec.convert(_filled(JobView, answer, keep=_ESSENTIAL), JobView)
    except msgspec.ValidationError as exc:
        raise _malformed(f"{str(answer.get('id'))[:80]}: {exc}") from None


def decode_jobs(answer: object) -> list[JobView]:
    """A list of job answers (``GET /v1/jobs``) as views."""
    import msgspec

    from floydd.model import JobView

    if not isinstance(answer, list):
        raise _malformed(f"a list of jobs is a JSON array, not {type(answer).__name__}")
    try:
        return msgspec.convert(answer, list[JobView])      # a daemon of this release: all there
    except msgspec.ValidationError:
        return [decode_job(item) for item in answer]


_ESSENTIAL = frozenset({"id", "project", "number", "state"})
"""The fields of :class:`JobView` a lenient decode does not make up."""


def _malformed(what: str) -> InternalError:
    return InternalError(f"floydd answered a job this floyd cannot read: {what}",
                         hint="floyd and floydd may be of different releases: `floyd --version` and "
                              "`floydd status` say which; update the older one", code="malformed_answer")


def _filled(kind: type, raw: dict, keep: frozenset[str] = frozenset()) -> dict:
    """``raw`` with every required field of dataclass ``kind`` it lacks (but those in ``keep``)
    set to the empty value of the field's type, in the dataclasses inside it too."""
    out = dict(raw)
    for name, hint, required, fill in _plan(kind):
        if name in out:
            if fill is not None:
                out[name] = fill(out[name])
        elif required and name not in keep:
            out[name] = _empty(hint)
    return out


@functools.cache
def _plan(kind: type) -> tuple[tuple[str, Any, bool, Callable[[Any], Any] | None], ...]:
    """Each field of dataclass ``kind``: its name, its type, whether it has no default, and how
    to fill the dataclasses inside a value of it (None: there are none)."""
    hints = typing.get_type_hints(kind)
    return tuple((f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING, _filler(hints[f.name]))
                 for f in fields(kind))


def _filler(hint: Any) -> Callable[[Any], Any] | None:
    """How to fill a value of type ``hint``: the dataclasses in it (alone, optional, in a tuple
    or as the values of a dict); None when it holds none."""
    if is_dataclass(hint):
        return lambda value: _filled(hint, value) if isinstance(value, dict) else value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    inner: Callable[[Any], Any] | None
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        inner = _filler(kinds[0]) if len(kinds) == 1 else None
        return None if inner is None else lambda value: None if value is None else inner(value)
    if origin is tuple and args:
        inner = _filler(args[0])
        return None if inner is None else lambda value: [inner(v) for v in value] if isinstance(value, list) else value
    if origin is dict and len(args) == 2:
        inner = _filler(args[1])
        return None if inner is None else \
            lambda value: {k: inner(v) for k, v in value.items()} if isinstance(value, dict) else value
    return None


def _empty(hint: Any) -> Any:
    """The value of a field of type ``hint`` that the daemon did not send: its type's empty
    value (a closed set's first)."""
    if is_dataclass(hint):
        return _filled(hint, {})
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        return None
    if origin is Literal:
        return args[0]
    return {str: "", int: 0, float: 0.0, bool: False, dict: {}, tuple: [], list: []}[origin or hint]
