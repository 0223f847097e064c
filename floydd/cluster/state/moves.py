"""A job's moves in the replicated state: a state change and what goes with it, a rerun by
its restart policy, and the lines of its cluster history.

Called by the jobs' commands (:mod:`floydd.cluster.state.jobs`) and a gang's parts
(:mod:`floydd.cluster.state.gangs`) on apply; pure, like the rest of the state.
"""

from __future__ import annotations

from floydd.errors import InvalidSpec
from floydd.model import ACTIVE_STATES, FINAL_STATES, RestartPolicy

__all__ = ["move", "rerun", "remember"]


_HISTORY = 32
"""Entries of a job's cluster history kept (the first one, submission, always stays)."""


def move(state, job: dict, new: str, why: str, ts: float) -> None:
    """Set the job's state (a move already checked) and what goes with it: the index of
    active jobs, start and end times, the placement a requeue forgets, the history."""
    old = job["state"]
    job["state"] = new
    if new in ACTIVE_STATES:
        state.active_index.activate(job)
    else:
        state.active_index.deactivate(job)           # before a requeue forgets where the job was placed
    if new == "running" and (old != "unknown" or job["started"] is None):
        job["started"] = ts
    elif new in FINAL_STATES:
        job["ended"] = ts
    elif new == "queued":
        job.update(node=None, gpus=[], parts=[], endpoint=None)
    job["unknown_since"] = ts if new == "unknown" else None
    remember(job, ts, f"{old} → {new}" + (f": {why}" if why else ""))


def rerun(state, job: dict, new: str, why: str, ts: float) -> bool:
    """Run the job again (queued, a new attempt to come) if its restart policy says so for a
    run that ended ``new``, it has runs left and no stop was asked; True if it does. A gang
    reruns whole; the rerun starts from the job's last ``/output`` (``output_version``)."""
    if new not in FINAL_STATES or job["state"] not in ACTIVE_STATES or job.get("stop_requested"):
        return False
    try:
        policy = RestartPolicy.from_dict(job["spec"].get("restart"))
    except InvalidSpec:                  # not a spec this version can read: never rerun
        return False
    reruns = job.get("reruns", 0)
    if not policy.reruns(new) or reruns + 1 >= policy.max_attempts:
        return False
    old, attempt = job["state"], job["attempts"]
    state.active_index.deactivate(job)
    job.update(state="queued", node=None, gpus=[], parts=[], endpoint=None, started=None, ended=None,
               exit_code=None, unknown_since=None, reruns=reruns + 1, waiting_for="",
               reason=f"attempt {attempt} {new}" + (f": {why}" if why else "") + "; it runs again")
    start = f", from the /output of {job['output_version']}" if job.get("output_version") else ""
    remember(job, ts, f"{old} → {new}" + (f": {why}" if why else "") +
              f"; run {reruns + 2} of at most {policy.max_attempts} follows (--restart {policy.policy}){start}")
    return True


def remember(job: dict, ts: float, text: str) -> None:
    """Add a line to the job's history (what the cluster decided: placements, requeues, stops)."""
    history = job.setdefault("history", [])
    history.append([ts, text])
    if len(history) > _HISTORY:
        del history[1:len(history) - _HISTORY + 1]
