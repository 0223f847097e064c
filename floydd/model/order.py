"""How a list of jobs is sorted and filtered: one rule for the daemon's ``GET /v1/jobs?sort=&q=``,
the TUI's jobs screen and the TUI's test double.

A sort is a key of :data:`SORTS`, ascending, or descending with a leading ``-``
(:class:`JobOrder`; ``-created`` is the listing's own order, newest first). Jobs equal under
the key keep the order they came in, newest first, whichever way they are sorted, so a page
(``limit``/``offset``) of a sort is the same page from one poll to the next.

A text filter keeps the jobs whose id, state, user, node, command or ``param=value`` holds
the text, case aside (:func:`job_text`, :func:`matching`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from floydd.errors import UserError

__all__ = ["SORTS", "STATE_ORDER", "MAX_FILTER", "JobOrder", "job_text", "filter_text", "matching",
           "ordered", "run_seconds"]

SORTS = ("created", "state", "project", "user", "time")
"""What a job listing sorts by: creation (the number breaks ties), state (:data:`STATE_ORDER`),
project, user, and time (how long it ran, or has waited: :func:`run_seconds`)."""
STATE_ORDER = {s: i for i, s in enumerate(("running", "unknown", "starting", "queued", "failed", "timeout", "lost",
                                           "stopped", "success"))}
"""A state sort, ascending: what needs a look first."""
MAX_FILTER = 200
"""The longest text filter (characters)."""

T = TypeVar("T")


class Sortable:
    """What a sort reads of a job (a :class:`~floydd.model.Job`, a JobView or anything with these):
    ``created``, ``number``, ``state``, ``project``, ``user``, ``started``, ``ended``."""

    created: float | None
    number: int
    state: str
    project: str
    user: str | None
    started: float | None
    ended: float | None


@dataclass(frozen=True, slots=True)
class JobOrder:
    """A sort: ``key`` of :data:`SORTS`, descending or not; written ``key`` or ``-key``."""

    key: str = "created"
    descending: bool = True

    @classmethod
    def parse(cls, text: str | None) -> "JobOrder":
        """``None`` or ``""``: newest first; UserError (400) for a key not in :data:`SORTS`."""
        text = (text or "").strip()
        if not text:
            return cls()
        key = text[1:] if text[0] in "-+" else text
        if key not in SORTS:
            raise UserError(f"cannot sort jobs by {key[:40]!r}", code="bad_sort",
                            hint=f"sort by one of: {', '.join(SORTS)} (a leading - for descending, e.g. sort=-time)")
        return cls(key, text[0] == "-")

    def __str__(self) -> str:
        return ("-" if self.descending else "") + self.key

    @property
    def newest_first(self) -> bool:
        return self.key == "created" and self.descending


def run_seconds(started: float | None, ended: float | None, created: float | None, now: float) -> float | None:
    """How long a job ran (or has run so far); for a queued job, how long it has waited."""
    if started:
        return (ended or now) - started
    if created and not ended:
        return now - created
    return None


def job_text(id: str, state: str, user: str | None, node: str | None, command: str | None,
             params: Mapping[str, Any] | None) -> str:
    """What a text filter looks in, lower case."""
    text = " ".join((id, state, user or "", node or "", command or "")).lower()
    return text + " " + " ".join(f"{k}={v}" for k, v in (params or {}).items()).lower()


def filter_text(text: str | None) -> str:
    """A text filter as asked (``q``), ready for :func:`matching`: stripped, lower case; ``""``
    for none. UserError (400) past :data:`MAX_FILTER` characters."""
    text = (text or "").strip()
    if len(text) > MAX_FILTER:
        raise UserError(f"the filter is {len(text)} characters; at most {MAX_FILTER}", code="bad_filter",
                        hint="filter by a part of a job's id, user, node, state, command or param")
    return text.lower()


def matching(items: Iterable[T], needle: str, text: Callable[[T], str]) -> list[T]:
    """``items`` whose :func:`job_text` (``text(item)``) holds ``needle`` (from :func:`filter_text`)."""
    return [i for i in items if needle in text(i)] if needle else list(items)


def ordered(items: Sequence[T], order: JobOrder, now: float,
            fields: Callable[[T], Sortable] = lambda item: item) -> list[T]:  # type: ignore[assignment,return-value]
    """``items`` (newest first) sorted by ``order``; ties keep their order (newest first), both ways."""
    key = order.key
    value: Callable[[Sortable], Any]
    if key == "created":
        value = lambda j: (j.created or 0, j.number)
    elif key == "state":
        value = lambda j: STATE_ORDER.get(j.state, len(STATE_ORDER))
    elif key == "project":
        value = lambda j: j.project
    elif key == "user":
        value = lambda j: j.user or ""
    else:
        value = lambda j: run_seconds(j.started, j.ended, j.created, now) or 0.0
    return sorted(items, key=lambda i: value(fields(i)), reverse=order.descending)
