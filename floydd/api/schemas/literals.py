"""The closed sets of values the answers use (``Literal`` types: a new value must reach the
TUI's styles before the daemon sends it)."""

from __future__ import annotations

from typing import Literal

from floydd.model import JobState  # noqa: F401 - one of the closed sets; its home is the model

Health = Literal["healthy", "suspect", "stale", "draining", "off", "down", "unknown", "disk full", "store failing"]
"""A node's health: ``healthy`` (up), ``suspect`` (the leader lost touch with it: nothing new goes
there, its jobs are ``unknown``), ``stale`` (up but its heartbeats stopped coming), the status it
reported otherwise (``draining``, ``off``, ``down``), ``unknown`` before its first report;
``disk full`` or ``store failing``: up, but its store takes no new data, so no copy and no job
is placed there until it recovers (:mod:`floydd.scheduler.storehealth`).
``floyd nodes`` and ``floydd members`` show the same word."""
NodeRole = Literal["leader", "voter", "learner", "none"]
MemberRole = Literal["voter", "learner", "none"]
Role = Literal["admin", "user"]
"""A person's role (:data:`floydd.cluster.state.people.ROLES`)."""
Visibility = Literal["lab", "private"]
"""Who may use a dataset: the whole lab, or its owner and admins."""

Point = tuple[int | None, float | None, float]
"""One metric point ``[step, value, ts]``; ``value`` is null for NaN or infinity."""
