"""Jobs brought in from another site (``floyd import``, :mod:`floydd.exchange`): the state machine's part.

An imported job is a finished job with a new number under the same project name, held by
the box that imported it (its records, log and code are there) and never placed, started or
rerun. It comes in two commands so that no job is visible before its records are in place::

    project.allocate   project, keys    one idempotency key per job to import (the origin's
                                        fingerprint and the job's id there): each gets a number
                                        (the same one again for a key seen before) -> {key: number}
    job.import         idem_key, number, project, node, spec, state, ...
                                        the job, finished, under the number its key was given;
                                        the same key again answers the job it made

Between the two, the importing box writes the job's records under its number (invisible:
the cluster has no such job yet). A key whose job was deleted later is forgotten with it, so
importing the same file again brings that job back, under a new number.

The ``imported`` field is the note of origin ``floyd info`` shows: the origin's fingerprint
and name, the job's id there, who exported and imported it, and when.

Pure, like the rest of the state machine: :class:`~floydd.cluster.state.machine.ClusterState` calls
these on apply, after :mod:`floydd.cluster.state.authz` decided the proposer may say them.
"""

from __future__ import annotations

from typing import Any

from floydd.cluster.state import code as state_code, versions
from floydd.cluster.state.jobs import answer
from floydd.errors import Conflict, InvalidSpec
from floydd.model import FINAL_STATES, Job, check_project

__all__ = ["allocate", "import_job", "MAX_ALLOCATE"]

MAX_ALLOCATE = 1000
"""The most job numbers one ``project.allocate`` hands out."""
_HISTORY = 32


def allocate(state: Any, cmd: dict) -> dict[str, int]:
    """A number in ``project`` for each key (see the module docstring)."""
    project, keys = check_project(cmd["project"]), cmd["keys"]
    if not 0 < len(keys) <= MAX_ALLOCATE or not all(isinstance(k, str) and k.startswith("import:") for k in keys):
        raise InvalidSpec(f"project.allocate: keys are 1 to {MAX_ALLOCATE} import keys")
    out: dict[str, int] = {}
    for key in keys:
        number = _number_of(state, key, project)
        if number is None:
            number = state.counters.get(project, 0) + 1
            state.counters[project] = number
            state.idem[key] = ["number", project, number]
        out[key] = number
    return out


def import_job(state: Any, cmd: dict) -> dict:
    """The finished job of ``cmd`` under its allocated number (or the job its key made before)."""
    key, project, number = cmd["idem_key"], check_project(cmd["project"]), cmd["number"]
    seen = state.idem.get(key)
    if seen is not None and seen[0] == "job" and seen[1] in state.jobs:
        return state.stored_job(seen[1])
    archived = state.archive.by_idem(key, state.applying)
    if archived is not None:
        return answer(archived)
    if seen != ["number", project, number]:
        raise Conflict(f"job.import: {project}/{number} was not allocated to {key[:80]}",
                       code="not_allocated", hint="allocate the number first (project.allocate)")
    if cmd["state"] not in FINAL_STATES:
        raise InvalidSpec(f"job.import: an imported job has ended; {cmd['state']!r} is not a final state")
    job_id = f"{project}/{number}"
    if job_id in state.jobs or state.archive.get(job_id, state.applying) is not None:
        raise Conflict(f"job {job_id} exists", code="job_exists")
    ts = cmd["ts"]
    history = [[float(h[0]), str(h[1])] for h in cmd.get("history") or () if _is_line(h)][-(_HISTORY - 1):]
    origin = cmd["imported"]
    history.append([ts, f"imported from {origin.get('origin_name') or 'another site'} "
                        f"(its {origin.get('job', '?')}) by {cmd.get('user') or 'someone'} on "
                        f"{state.name_of(cmd['node'])}"])
    job = Job.from_dict({
        "id": job_id, "project": project, "number": number, "idem_key": key, "spec": cmd["spec"],
        "state": cmd["state"], "reason": cmd.get("reason", ""), "waiting_for": "", "created": cmd["created"],
        "updated": ts, "started": cmd.get("started"), "ended": cmd.get("ended"), "node": cmd["node"],
        "gpus": [], "attempts": 1, "placed_term": None, "exit_code": cmd.get("exit_code"),
        "output_version": cmd.get("output_version"), "summary": dict(cmd.get("summary") or {}),
        "stop_requested": "", "origin": cmd["node"], "user": cmd.get("user", ""), "parts": [],
        "endpoint": None, "reruns": 0, "unknown_since": None, "imported": origin, "history": history})
    state.put_job(job)
    state.idem[key] = ["job", job_id]
    state.counters[project] = max(state.counters.get(project, 0), number)
    if versions.at_least(state, 3):     # its code, stored by the importing box, kept on R boxes (issue 21)
        state_code.submitted(state, job, held=True)
    return state.stored_job(job_id)


def _number_of(state: Any, key: str, project: str) -> int | None:
    """The number ``key`` was given before (allocated, or its job made), else None."""
    seen = state.idem.get(key)
    if seen is not None:
        if seen[0] == "number" and seen[1] == project:
            return seen[2]
        job = state.jobs.get(seen[1]) if seen[0] == "job" else None
        if job is not None and job.project == project:
            return job.number
        raise Conflict(f"idempotency key {key[:80]!r} was used for something else", code="idempotency_key_reused")
    archived = state.archive.by_idem(key, state.applying)
    if archived is not None and archived.project == project:
        return archived.number
    return None


def _is_line(h: object) -> bool:
    return isinstance(h, (list, tuple)) and len(h) == 2 and isinstance(h[0], (int, float)) and isinstance(h[1], str)
