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
"""

from __future__ import annotations

from floydd.cluster.state.commands import copy_of
from floydd.errors import Conflict, InvalidSpec
from floydd.model import ACTIVE_STATES, FINAL_STATES, TRANSITIONS, RestartPolicy

__all__ = ["move", "rerun", "remember", "part_update"]

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


def part_update(state, job: dict, cmd: dict) -> dict:
    """A box's report on its part of a gang; the job's state follows its parts."""
    key, rank, parts = job["id"], cmd["rank"], job.get("parts") or []
    if not 0 <= rank < len(parts):
        raise Conflict(f"job {key} has no part of rank {rank}", code="no_such_part")
    part = parts[rank]
    if "node" in cmd and cmd["node"] != part["node"]:
        raise Conflict(f"rank {rank} of {key} is placed on {part['node']}, not {cmd['node']}",
                       code="wrong_node")
    new, old = cmd.get("state"), part["state"]
    if new is not None and new != old:
        if new not in TRANSITIONS:
            raise InvalidSpec(f"{new!r} is not a job state")
        if new not in TRANSITIONS[old]:
            raise Conflict(f"rank {rank} of {key} is {old}; it cannot become {new}", code="bad_transition")
        part["state"] = new
        why = cmd.get("reason") or ""
        remember(job, cmd["ts"], f"rank {rank} on {state.name_of(part['node'])}: {old} → {new}"
                                  + (f": {why}" if why else ""))
    for name in ("reason", "exit_code"):
        if name in cmd:
            part[name] = cmd[name]
    if "endpoint" in cmd:
        if rank != 0:
            raise InvalidSpec(f"job.update: only rank 0 sets the rendezvous of {key}")
        job["endpoint"] = cmd["endpoint"]
    if rank == 0:
        for name in ("exit_code", "output_version"):
            if name in cmd:
                job[name] = cmd[name]
        if "summary" in cmd:
            job["summary"].update(cmd["summary"])
    job["updated"] = cmd["ts"]
    if job["state"] in ACTIVE_STATES:
        follow_parts(state, job, cmd["ts"])
    return copy_of(job)


def follow_parts(state, job: dict, ts: float) -> None:
    """The job's state from its parts'. While a part is ``unknown`` (its box out of touch)
    the job waits for it; a part lost with its box names that box."""
    parts, old = job["parts"], job["state"]
    if any(p["state"] == "unknown" for p in parts):
        return
    ended = [p for p in parts if p["state"] == "lost"] or \
        [p for p in parts if p["state"] in FINAL_STATES and p["state"] != "success"]
    if ended:
        first = ended[0]
        new = first["state"]
        why = f"rank {first['rank']} on {state.name_of(first['node'])} {new}" + \
              (f": {first['reason']}" if first["reason"] else "")
    elif all(p["state"] == "success" for p in parts):
        new, why = "success", ""
    elif old in ("starting", "unknown") and all(p["state"] in ("running", "success") for p in parts):
        new, why = "running", ""
    elif old == "unknown":
        new, why = "starting", ""       # every box is back; some part has yet to start
    else:
        return
    if new != "running" and new != "starting":
        job["reason"] = why
        if rerun(state, job, new, why, ts):
            return
    job["state"] = new              # derived, so starting -> success is fine: no part skipped running
    job["unknown_since"] = None
    if job["started"] is None and new in ("running", "success", "timeout"):
        job["started"] = ts
    if new not in ("running", "starting"):
        job["ended"] = ts
        state.active_index.deactivate(job)
    remember(job, ts, f"{old} → {new}" + (f": {why}" if why else ""))
