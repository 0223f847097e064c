"""A job as the cluster keeps it: its spec, its state and its placement's parts, typed.

The replicated state stores a job as plain data (a msgpack map in its snapshot, a row in the
archive); :meth:`Job.from_dict` reads that stored form once, where a job enters a part of
the code that decides about it, and :meth:`Job.to_dict` writes it back. What the stored form
calls ``gpus`` is the GPU indices a placement gave the job (:attr:`JobPart.gpu_ids`), never
the count it asked for (:attr:`~floydd.model.Resources.gpu_count`, in its spec).

A placed job has parts, one per box: a job on one box has one part, rank None (its own
``node``/``gpus``/``state``); a gang's parts are ranked from 0, rank 0 speaking for the job.
An archived job (:mod:`floydd.cluster.state.archive`) says when it was archived
(:attr:`Job.archived_at`) and keeps no history. Keys this version does not know (a newer
box's) are kept in :attr:`Job.extra` and written back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from floydd.errors import InvalidSpec
from floydd.model.names import DatasetRef
from floydd.model.resources import asked_gpu_count, asked_nodes, asked_per_box
from floydd.model.restart import RestartPolicy
from floydd.model.states import ACTIVE_STATES
from floydd.model.spec import JobSpec

__all__ = ["Job", "JobPart", "unsettled_on"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPart:
    """One box's part of a placed job."""

    rank: int | None
    """Its rank in a gang; None for a job on one box."""
    node: str
    """The id of the box it runs on."""
    gpu_ids: tuple[int, ...] = ()
    """The indices of the GPUs the placement gave it there (a job asks for a count of GPUs,
    :attr:`~floydd.model.Resources.gpu_count`; this is which ones it holds)."""
    state: str
    """Its state (a job on one box: the job's)."""
    exit_code: int | None = None
    """How its process exited (a gang's part; a job on one box: the job's)."""
    reason: str = ""
    """Why it is in its state (a gang's part; a job on one box: the job's)."""

    def to_dict(self) -> dict[str, Any]:
        """A gang part's stored form."""
        return {"rank": self.rank, "node": self.node, "gpus": list(self.gpu_ids), "state": self.state,
                "exit_code": self.exit_code, "reason": self.reason}


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_UNREAD = object()
"""A :class:`Job`'s spec not read yet."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job as the replicated state keeps it (module docstring). Frozen: a change is a new
    value (:func:`dataclasses.replace`)."""

    id: str
    """Its key, ``project/number``."""
    project: str
    number: int
    idem_key: str = ""
    """The submission's idempotency key: a retried submission finds this job."""
    stored_spec: Mapping[str, Any]
    """Its spec as stored (read-only; written back as it is, so no key of a newer box's spec
    is lost): codecs only, the rest of the code reads :attr:`spec`."""
    state: str
    reason: str = ""
    waiting_for: str = ""
    """Why it is still queued (the placer's words), if it is."""
    created: float
    updated: float
    started: float | None = None
    ended: float | None = None
    node: str | None = None
    """The box of its placement (a gang: rank 0's); None while queued."""
    gpu_ids: tuple[int, ...] = ()
    """The GPU indices its placement holds there (a gang: rank 0's)."""
    attempts: int = 0
    """Placements so far: the attempt of its current (or last) run."""
    reruns: int = 0
    """Runs its restart policy started again."""
    placed_term: int | None = None
    exit_code: int | None = None
    output_version: str | None = None
    """The version of its ``/output`` saved last (a rerun starts from it)."""
    summary: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Its metrics' last values, as its box reported them."""
    stop_requested: str = ""
    """Why a stop was asked ("" if none)."""
    origin: str = ""
    """The id of the box it was submitted on."""
    user: str = ""
    """Who submitted it."""
    parts: tuple[JobPart, ...] = ()
    """A gang's parts, by rank (empty for a job on one box)."""
    endpoint: str | None = None
    """A gang's rendezvous, committed by rank 0's box before any part starts."""
    unknown_since: float | None = None
    """Since when its box is out of touch, while it is ``unknown``."""
    history: tuple[tuple[float, str], ...] = ()
    """What the cluster decided about it, oldest first (an archived job keeps none)."""
    archived_at: int | None = None
    """The log index of the ``job.archive`` that moved it to the archive; None while it is in
    the hot state."""
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Stored keys this version does not know, written back unchanged."""
    _spec: Any = field(default=_UNREAD, init=False, repr=False, compare=False)

    @property
    def spec(self) -> JobSpec | None:
        """What it runs with; None for a spec this version cannot read (a newer box's): such a
        job is listed and kept, never rerun. Read from :attr:`stored_spec` when first asked (most
        reads of a job, a listing's, never look at its spec)."""
        if self._spec is _UNREAD:
            try:
                spec = JobSpec.from_dict(self.stored_spec)
            except (InvalidSpec, KeyError, TypeError, ValueError, AttributeError):
                spec = None
            object.__setattr__(self, "_spec", spec)
        return self._spec

    @property
    def is_gang(self) -> bool:
        return bool(self.parts)

    # What it asks for, read off its stored spec as leniently as the replicated state must (a
    # job.submit is any spec an authorised box sent; every box reads the same answer from it,
    # whatever release it runs, and the placer reads what the state's checks read).

    @property
    def asked_gpu_count(self) -> int | None:
        """GPUs it asks for on each box; None when its spec says no whole number."""
        return asked_gpu_count(self.stored_spec)

    @property
    def asked_nodes(self) -> int:
        """Boxes it spans (1 unless its spec says a whole number from 1)."""
        return asked_nodes(self.stored_spec)

    @property
    def asked_per_box(self) -> tuple[int, int]:
        """(thousandths of a core, bytes of memory) it asks for on each box; (0, 0) for none."""
        return asked_per_box(self.stored_spec)

    @property
    def code_tree(self) -> str | None:
        """The id of its code tree (hex), None when its spec names none."""
        tree = self.stored_spec.get("code_tree")
        return tree if isinstance(tree, str) else None

    @property
    def data_refs(self) -> tuple[DatasetRef, ...]:
        """The dataset versions it mounts (a mount whose ref does not read is left out)."""
        refs = (DatasetRef.stored(m.get("ref")) for m in self._mounts())
        return tuple(ref for ref in refs if ref is not None)

    @property
    def data_trees(self) -> tuple[str, ...]:
        """The trees (hex ids) of the dataset versions it mounts, as its spec resolved them."""
        return tuple(tree for m in self._mounts() if isinstance(tree := m.get("tree"), str))

    def _mounts(self) -> tuple[Mapping[str, Any], ...]:
        mounts = self.stored_spec.get("data")
        if not mounts or not isinstance(mounts, (list, tuple)):
            return ()
        return tuple(m for m in mounts if isinstance(m, Mapping))

    @property
    def restart_policy(self) -> RestartPolicy | None:
        """Its restart policy (the default for a spec from before them); None when its spec's
        does not read (a newer box's): such a job is never rerun."""
        try:
            return RestartPolicy.from_dict(self.stored_spec.get("restart"))
        except (InvalidSpec, TypeError, AttributeError):
            return None

    def part_on(self, node: str) -> JobPart | None:
        """``node``'s part of this job, or None if it has none there. The state checked the
        GPU indices when it committed the placement."""
        for part in self.parts:
            if part.node == node:
                return part
        if not self.parts and self.node == node:
            return JobPart(rank=None, node=node, gpu_ids=self.gpu_ids, state=self.state,
                           exit_code=self.exit_code, reason=self.reason)
        return None

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> Job | None:
        """:meth:`from_dict`, None for None (a job the state does not have)."""
        return None if raw is None else cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Job:
        """From the stored form (replicated state, archive, a forwarded read): a few
        microseconds, the spec is read when first asked."""
        stored_spec = raw.get("spec")
        parts = tuple(JobPart(rank=p["rank"], node=p["node"], gpu_ids=tuple(p["gpus"]), state=p["state"],
                              exit_code=p.get("exit_code"), reason=p.get("reason") or "")
                      for p in raw.get("parts") or ())
        return cls(id=raw["id"], project=raw["project"], number=raw["number"], idem_key=raw.get("idem_key") or "",
                   stored_spec=MappingProxyType(stored_spec if isinstance(stored_spec, dict) else {}),
                   state=raw["state"], reason=raw.get("reason") or "",
                   waiting_for=raw.get("waiting_for") or "", created=raw["created"], updated=raw["updated"],
                   started=raw.get("started"), ended=raw.get("ended"), node=raw.get("node"),
                   gpu_ids=tuple(raw.get("gpus") or ()), attempts=raw.get("attempts") or 0,
                   reruns=raw.get("reruns") or 0, placed_term=raw.get("placed_term"), exit_code=raw.get("exit_code"),
                   output_version=raw.get("output_version"),
                   summary=MappingProxyType(dict(raw.get("summary") or {})),
                   stop_requested=raw.get("stop_requested") or "", origin=raw.get("origin") or "",
                   user=raw.get("user") or "", parts=parts, endpoint=raw.get("endpoint"),
                   unknown_since=raw.get("unknown_since"),
                   history=tuple((h[0], h[1]) for h in raw.get("history") or ()),
                   archived_at=raw.get("archived_at"),
                   extra=MappingProxyType({k: v for k, v in raw.items() if k not in _KNOWN})
                   if raw.keys() - _KNOWN else _EMPTY)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        out = {"id": self.id, "project": self.project, "number": self.number, "idem_key": self.idem_key,
               "spec": dict(self.stored_spec),
               "state": self.state, "reason": self.reason, "waiting_for": self.waiting_for,
               "created": self.created, "updated": self.updated, "started": self.started, "ended": self.ended,
               "node": self.node, "gpus": list(self.gpu_ids), "attempts": self.attempts, "reruns": self.reruns,
               "placed_term": self.placed_term, "exit_code": self.exit_code, "output_version": self.output_version,
               "summary": dict(self.summary), "stop_requested": self.stop_requested, "origin": self.origin,
               "user": self.user, "parts": [p.to_dict() for p in self.parts], "endpoint": self.endpoint,
               "unknown_since": self.unknown_since, "history": [[ts, text] for ts, text in self.history]}
        if self.archived_at is not None:          # the archive's form: when it moved, no history
            if not self.history:
                del out["history"]
            out["archived_at"] = self.archived_at
        out.update(self.extra)
        return out


_KNOWN = frozenset({"id", "project", "number", "idem_key", "spec", "state", "reason", "waiting_for", "created",
                    "updated", "started", "ended", "node", "gpus", "attempts", "reruns", "placed_term", "exit_code",
                    "output_version", "summary", "stop_requested", "origin", "user", "parts", "endpoint",
                    "unknown_since", "history", "archived_at", "deleted_at"})
"""The stored keys :class:`Job` has a field for (and ``deleted_at``, the archive's row's:
:class:`~floydd.cluster.state.archive.Row`)."""


def unsettled_on(job: Job, node: str) -> bool:
    """Whether ``node`` has something to do about ``job`` (a box's reconciler asks this of every
    job each round): it has a part there and the job is active, or it is a gang whose part
    there is still active (a gang's part is reported even after the job ended, so every part
    ends up final)."""
    if job.parts:
        return any(p.node == node and (job.state in ACTIVE_STATES or p.state in ACTIVE_STATES) for p in job.parts)
    return job.node == node and job.state in ACTIVE_STATES
