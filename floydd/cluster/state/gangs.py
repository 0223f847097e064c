"""A gang job's parts in the replicated state: each box's report, and the job's state from them.

A gang job (``spec.resources.nodes`` > 1, :mod:`floydd.jobs.gang`) is placed whole: its
``parts`` (node, GPUs, rank, state, exit code) live on the job, ``node``/``gpus`` are rank 0's,
and ``endpoint`` is the rendezvous rank 0's box commits before any part starts. Each box
reports its own part (``job.update`` with ``rank``); the job's state follows its parts:
running once all run, success once all succeed, and the first part to fail, stop or be lost
ends the job the same way (the other boxes then stop their parts). The leader's
``unknown``/``lost`` names the silent boxes (``silent``), whose parts take that state: while
a part is unknown the job waits for it, and a part lost with its box is named as the cause
before any part that failed meanwhile (its peers fail when it vanishes). A gang reruns whole
(:mod:`floydd.cluster.state.jobs`).

Called by ``job.update`` (:mod:`floydd.cluster.state.jobs`) with the state; pure, like the rest of it.
"""

from __future__ import annotations

from floydd.cluster.state import moves
from floydd.cluster.state.copies import copy_of
from floydd.errors import Conflict, InvalidSpec
from floydd.model import ACTIVE_STATES, FINAL_STATES, TRANSITIONS

__all__ = ["part_update"]


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
        moves.remember(job, cmd["ts"], f"rank {rank} on {state.name_of(part['node'])}: {old} → {new}"
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
        if moves.rerun(state, job, new, why, ts):
            return
    job["state"] = new              # derived, so starting -> success is fine: no part skipped running
    job["unknown_since"] = None
    if job["started"] is None and new in ("running", "success", "timeout"):
        job["started"] = ts
    if new not in ("running", "starting"):
        job["ended"] = ts
        state.active_index.deactivate(job)
    moves.remember(job, ts, f"{old} → {new}" + (f": {why}" if why else ""))
