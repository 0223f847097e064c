"""Job states and the moves between them (``TRANSITIONS``; the replicated state adds the
backward edges of :data:`REQUEUE`, for a job whose box went silent before it started and for
a run its restart policy reruns)::

    queued ──place──► starting ──► running ──► success | failed | stopped | timeout | lost
      ▲  │               │  │        │  ▲
      │  │               │  │        ▼  │ (its box is back: the run went on)
      │  │               │  └──► unknown ──► success | failed | stopped | timeout | lost
      │  └───────────────┴──► stopped | failed | lost        (never started)
      └── requeue (not started yet) / rerun (restart policy: failed or lost, attempts left) ──┘

``unknown`` (DESIGN §5b "Outages are not failures"): the box running the job is out of touch;
the job may well run on. It is a cluster state only: a box's own records never hold it. The
box coming back reports what became of the run; a box silent past the job's ``lost_after``
window makes it ``lost``. A rerun is the same job (same number) with a new attempt, and starts
from the last attempt's ``/output`` (:class:`~floydd.model.RestartPolicy`).

Final states are final: the state machine turns a failed or lost run its policy reruns into
``queued`` instead of ending the job; a job that ended is run again as a new job (``floyd
restart``), never revived.
"""

from __future__ import annotations

from typing import Literal, Mapping

from floydd.errors import Conflict, InvalidSpec

__all__ = ["STATES", "JobState", "FINAL_STATES", "ACTIVE_STATES", "OPEN_STATES", "WAITING_STATES", "UNSUCCESSFUL_STATES",
           "RUN_OUTCOMES", "STOP_OUTCOMES", "TRANSITIONS", "REQUEUE", "check_state", "check_transition"]

STATES = ("queued", "starting", "running", "unknown", "success", "failed", "stopped", "timeout", "lost")
JobState = Literal["queued", "starting", "running", "unknown", "success", "failed", "stopped", "timeout", "lost"]
"""A job's state as a type (the API's answers and :mod:`floydd.model.view`): :data:`STATES`."""
FINAL_STATES = frozenset({"success", "failed", "stopped", "timeout", "lost"})
ACTIVE_STATES = frozenset({"starting", "running", "unknown"})
"""Placed and not over: the job holds its GPUs (an ``unknown`` run may still use them)."""
OPEN_STATES = frozenset(STATES) - FINAL_STATES
"""Not over: the job may still change, and be stopped (queued, or active)."""
WAITING_STATES = frozenset({"queued", "starting"})
"""Not running yet: waiting to be placed, or placed and starting (``waiting_for`` says why)."""
UNSUCCESSFUL_STATES = FINAL_STATES - {"success"}
"""Over, and not a success."""
RUN_OUTCOMES = ("success", "failed", "stopped", "timeout")
"""How a run that its box saw to the end ended (what its agent and its records say): the
final states but ``lost``, which only the cluster declares."""
STOP_OUTCOMES = ("stopped", "failed")
"""How a stop asked of a run ends it: ``stopped``, or ``failed`` when the daemon stops it for
a fault of its own (its disk filled, its inputs went missing)."""
TRANSITIONS: Mapping[str, frozenset[str]] = {
    "queued": frozenset({"starting", "stopped", "failed", "lost"}),
    "starting": frozenset({"running", "unknown", "stopped", "failed", "lost"}),
    "running": frozenset({"unknown", "success", "failed", "stopped", "timeout", "lost"}),
    "unknown": frozenset({"running", "success", "failed", "stopped", "timeout", "lost"}),
    **{state: frozenset() for state in FINAL_STATES},
}
REQUEUE = frozenset({("starting", "queued"), ("running", "queued"), ("unknown", "queued")})
"""The backward moves, made only by the replicated state: the box a job was placed on went
silent before the job started (the leader requeues it), or the restart policy reruns a
failed or lost run; either way the job waits to be placed again, as a new attempt."""


def check_state(state: object) -> str:
    if state not in TRANSITIONS:
        raise InvalidSpec(f"{state!r} is not a job state", hint=f"job states are: {', '.join(STATES)}")
    return state  # type: ignore[return-value]


def check_transition(key: str, old: str, new: str, *, requeue: bool = False) -> None:
    """``Conflict`` unless a job may move from ``old`` to ``new`` (``requeue``: the leader's
    :data:`REQUEUE` is allowed too)."""
    check_state(new)
    if new in TRANSITIONS[old] or (requeue and (old, new) in REQUEUE):
        return
    if old in FINAL_STATES:
        hint = "a job that ended stays ended; run it again as a new job (floyd restart)"
    else:
        hint = f"from {old} a job can become: {', '.join(s for s in STATES if s in TRANSITIONS[old])}"
    raise Conflict(f"job {key} is {old}; it cannot become {new}", hint=hint, code="bad_transition")
