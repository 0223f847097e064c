"""A job's moves in the replicated state: a state change and what goes with it, a rerun by
its restart policy, the lines of its cluster history, and a gang's state from its parts.

Called with the state by the jobs' commands (:mod:`floydd.cluster.state.jobs`) on apply;
pure, like the rest of the state.

Gangs. A gang job (``spec.resources.nodes`` > 1, :mod:`floydd.jobs.gang`) is placed whole: its
``parts`` (node, GPUs, rank, state, exit code) live on the job, ``node``/``gpus`` are rank 0's,
and ``endpoint`` is the rendezvous rank 0's box commits before any part starts. Each box
reports its own part (``job.update`` with ``rank``); the job's state follows its parts:
running once all run, success once all succeed, and the first part to fail, stop or be lost
ends the job the same way (the other boxes then stop their parts). The leader's
``unknown``/``lost`` names the silent boxes (``silent``), whose parts take that state: while
a part is unknown the job waits for it, and a part lost with its box is named as the cause
before any part that failed meanwhile (its peers fail when it vanishes). A gang reruns whole
(:func:`rerun`).

A job is a frozen :class:`~floydd.model.Job`: each function here takes the job as it is and
returns the job as it becomes, which its caller stores; the index of active jobs is told
of a job leaving it with the job as it was counted (before a requeue forgets its placement).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping

from floydd.errors import Conflict, InvalidSpec
from floydd.model import ACTIVE_STATES, FINAL_STATES, TRANSITIONS, Job

__all__ = ["move", "rerun", "remember", "part_update", "with_summary"]

_HISTORY = 32
"""Entries of a job's cluster history kept (the first one, submission, always stays)."""


def move(state, job: Job, new: str, why: str, ts: float) -> Job:
    """The job moved to ``new`` (a move already checked) with what goes with it: the index of
    active jobs, start and end times, the placement a requeue forgets, the history."""
    old = job.state
    changes: dict[str, Any] = {"state": new, "unknown_since": ts if new == "unknown" else None}
    if new == "running" and (old != "unknown" or job.started is None):
        changes["started"] = ts
    elif new in FINAL_STATES:
        changes["ended"] = ts
    elif new == "queued":
        changes.update(node=None, gpu_ids=(), parts=(), endpoint=None)
    moved = remember(replace(job, **changes), ts, f"{old} → {new}" + (f": {why}" if why else ""))
    if new in ACTIVE_STATES:
        state.active_index.activate(moved)
    else:
        state.active_index.deactivate(job)           # as counted: before a requeue forgot its placement
    return moved


def rerun(state, job: Job, new: str, why: str, ts: float) -> Job | None:
    """The job queued again (a new attempt to come) if its restart policy says so for a run
    that ended ``new``, it has runs left and no stop was asked; None if it does not. A gang
    reruns whole; the rerun starts from the job's last ``/output`` (``output_version``)."""
    if new not in FINAL_STATES or job.state not in ACTIVE_STATES or job.stop_requested:
        return None
    policy = job.restart_policy
    if policy is None:                   # not a spec this version can read: never rerun
        return None
    if not policy.reruns(new) or job.reruns + 1 >= policy.max_attempts:
        return None
    state.active_index.deactivate(job)
    again = replace(job, state="queued", node=None, gpu_ids=(), parts=(), endpoint=None, started=None, ended=None,
                    exit_code=None, unknown_since=None, reruns=job.reruns + 1, waiting_for="",
                    reason=f"attempt {job.attempts} {new}" + (f": {why}" if why else "") + "; it runs again")
    start = f", from the /output of {job.output_version}" if job.output_version else ""
    return remember(again, ts, f"{job.state} → {new}" + (f": {why}" if why else "") +
                    f"; run {job.reruns + 2} of at most {policy.max_attempts} follows (--restart {policy.policy}){start}")


def remember(job: Job, ts: float, text: str) -> Job:
    """The job with a line more in its history (what the cluster decided: placements, requeues,
    stops); the oldest but the first go past :data:`_HISTORY`."""
    history = (*job.history, (ts, text))
    if len(history) > _HISTORY:
        history = history[:1] + history[len(history) - _HISTORY + 1:]
    return replace(job, history=history)


def with_summary(job: Job, summary: Mapping[str, Any]) -> Job:
    """The job with ``summary``'s entries over its own (a box's report of its metrics)."""
    return replace(job, summary=MappingProxyType({**job.summary, **summary}))


def part_update(state, job: Job, cmd: dict) -> Job:
    """A box's report on its part of a gang; the job's state follows its parts."""
    key, rank, parts = job.id, cmd["rank"], list(job.parts)
    if not 0 <= rank < len(parts):
        raise Conflict(f"job {key} has no part of rank {rank}", code="no_such_part")
    part = parts[rank]
    if "node" in cmd and cmd["node"] != part.node:
        raise Conflict(f"rank {rank} of {key} is placed on {part.node}, not {cmd['node']}",
                       code="wrong_node")
    new, old = cmd.get("state"), part.state
    if new is not None and new != old:
        if new not in TRANSITIONS:
            raise InvalidSpec(f"{new!r} is not a job state")
        if new not in TRANSITIONS[old]:
            raise Conflict(f"rank {rank} of {key} is {old}; it cannot become {new}", code="bad_transition")
    if "endpoint" in cmd and rank != 0:
        raise InvalidSpec(f"job.update: only rank 0 sets the rendezvous of {key}")
    if new is not None and new != old:
        part = replace(part, state=new)
        why = cmd.get("reason") or ""
        job = remember(job, cmd["ts"], f"rank {rank} on {state.name_of(part.node)}: {old} → {new}"
                                       + (f": {why}" if why else ""))
    part = replace(part, **{name: cmd[name] for name in ("reason", "exit_code") if name in cmd})
    parts[rank] = part
    changes: dict[str, Any] = {"parts": tuple(parts), "updated": cmd["ts"]}
    if "endpoint" in cmd:
        changes["endpoint"] = cmd["endpoint"]
    if rank == 0:
        changes.update({name: cmd[name] for name in ("exit_code", "output_version") if name in cmd})
    job = replace(job, **changes)
    if rank == 0 and "summary" in cmd:
        job = with_summary(job, cmd["summary"])
    if job.state in ACTIVE_STATES:
        job = follow_parts(state, job, cmd["ts"])
    return job


def follow_parts(state, job: Job, ts: float) -> Job:
    """The job's state from its parts'. While a part is ``unknown`` (its box out of touch)
    the job waits for it; a part lost with its box names that box."""
    parts, old = job.parts, job.state
    if any(p.state == "unknown" for p in parts):
        return job
    ended = [p for p in parts if p.state == "lost"] or \
        [p for p in parts if p.state in FINAL_STATES and p.state != "success"]
    if ended:
        first = ended[0]
        new = first.state
        why = f"rank {first.rank} on {state.name_of(first.node)} {new}" + (f": {first.reason}" if first.reason else "")
    elif all(p.state == "success" for p in parts):
        new, why = "success", ""
    elif old in ("starting", "unknown") and all(p.state in ("running", "success") for p in parts):
        new, why = "running", ""
    elif old == "unknown":
        new, why = "starting", ""       # every box is back; some part has yet to start
    else:
        return job
    if new != "running" and new != "starting":
        job = replace(job, reason=why)
        again = rerun(state, job, new, why, ts)
        if again is not None:
            return again
    changes: dict[str, Any] = {"state": new, "unknown_since": None}   # derived, so starting -> success is
    if job.started is None and new in ("running", "success", "timeout"):  # fine: no part skipped running
        changes["started"] = ts
    if new not in ("running", "starting"):
        changes["ended"] = ts
        state.active_index.deactivate(job)
    return remember(replace(job, **changes), ts, f"{old} → {new}" + (f": {why}" if why else ""))
