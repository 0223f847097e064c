"""The jobs' commands of the replicated state: submit, place, update, delete, archive, reserve.

Job states and their moves are the job model's (:mod:`floydd.model`), with its backward
edges (:data:`~floydd.model.REQUEUE`): a job whose box went silent before it started is
requeued by the leader, and a run that ends ``failed`` or ``lost`` is turned into ``queued``
right here when its restart policy reruns it (``reruns`` counts them; the next placement is
the next attempt, starting from the job's ``output_version``)::

    queued ──place──► starting ──► running ──► success | failed | stopped | timeout | lost
      ▲  │               │  │        │  ▲
      │  │               │  │        ▼  │  its box is back and says the run goes on
      │  │               │  └──► unknown ──► what the box says | lost (silent past lost_after)
      │  └───────────────┴──┴──► stopped | failed | lost
      └── requeue (not started) / rerun (policy, runs left, no stop asked) ──┘

``unknown``: the leader lost touch with the job's box (the node is ``suspect``); the job
keeps its GPUs and ``unknown_since`` says since when. A box's note on an older attempt
(``job.update`` with ``note`` and a past ``attempt``: e.g. it stopped a run that was replaced
while it was away) is added to the history and changes nothing else. A job's moves, reruns
and a gang job's parts are :mod:`floydd.cluster.state.moves`'.

A placement (``job.place``, fenced by its ``term`` like every leader action) is re-checked
against the state it lands on (the job still queued, the node up and holding those GPU
indices, none of them held by an active job, and the cores and memory the job asks for on
each box not set aside for other active jobs there, where the node reported its own; a spec
without ``cpus``/``memory`` asks for none: :mod:`floydd.cluster.state.index`).

:class:`~floydd.cluster.state.machine.ClusterState` calls these with itself on apply, after
:mod:`floydd.cluster.state.authz` decided the proposer may say them. Pure, like the rest of the state. A job is a frozen :class:`~floydd.model.Job`: a command
works out the job as it becomes and stores it once it is sure of it, so a refused command
changes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from floydd.cluster.state import code as state_code, moves, versions
from floydd.cluster.state.archive import archived_form
from floydd.cluster.state.nodes import gpu_indices
from floydd.cluster.state.commands import copy_of
from floydd.errors import Conflict, InvalidSpec
from floydd.model import ACTIVE_STATES, FINAL_STATES, REQUEUE, TRANSITIONS, Job, JobPart, check_project

__all__ = ["submit", "place", "update", "delete", "archive", "reserve", "answer"]


def answer(job: Job) -> dict:
    """A command's answer about a job: its stored form, a copy (it may go over the wire)."""
    return copy_of(job.to_dict())


def submit(state, cmd: dict, term: int) -> dict:
    seen = state.idem.get(cmd["idem_key"])
    if seen is not None:
        if seen[0] != "job" or seen[1] not in state.jobs:
            raise Conflict(f"idempotency key {cmd['idem_key']!r} was used for something else",
                           code="idempotency_key_reused", hint="use a fresh key for a new submission")
        return answer(state.jobs[seen[1]])
    archived = state.archive.by_idem(cmd["idem_key"], state.applying)
    if archived is not None:                  # a retry long after: the same job, archived since
        return answer(archived)
    project = check_project(cmd["project"])
    number = cmd.get("number", state.counters.get(project, 0) + 1)
    if not 1 <= number < 10**18:
        raise InvalidSpec(f"job.submit: number {number} is not a job number")
    key = f"{project}/{number}"
    if key in state.jobs or state.archive.get(key, state.applying) is not None:
        raise Conflict(f"job {key} exists", code="job_exists", hint="adopt it under another number")
    ts = cmd["ts"]
    job = Job.from_dict({"id": key, "project": project, "number": number, "idem_key": cmd["idem_key"],
                         "spec": cmd["spec"], "state": "queued", "created": ts, "updated": ts,
                         "origin": cmd.get("origin", ""), "user": cmd.get("user", ""),
                         "history": [[ts, f"submitted on {state.name_of(cmd.get('origin', ''))}"]]})
    state.counters[project] = max(state.counters.get(project, 0), number)
    state.put_job(job)
    state.idem[cmd["idem_key"]] = ["job", key]
    if versions.at_least(state, 3):            # its code is kept like a dataset version's (issue 21)
        state_code.submitted(state, job, held=bool(cmd.get(state_code.HELD_FIELD)))
    return answer(job)


def place(state, cmd: dict, term: int) -> dict:
    key = cmd["job"]
    parts = list(cmd.get("parts") or [{"node": cmd["node"], "gpus": cmd["gpus"]}])
    job = state.live_job(key)
    if job.state != "queued":
        raise Conflict(f"job {key} is {job.state}, not queued: it cannot be placed", code="job_not_queued")
    if (parts[0]["node"], list(parts[0]["gpus"])) != (cmd["node"], list(cmd["gpus"])):
        raise InvalidSpec(f"placement of {key}: node and gpus must be those of rank 0")
    if len(parts) != job.asked_nodes:
        raise InvalidSpec(f"job {key} spans {job.asked_nodes} nodes, the placement gives {len(parts)}")
    if len({p["node"] for p in parts}) != len(parts):
        raise InvalidSpec(f"placement of {key} names a node twice")
    wanted = job.asked_gpu_count
    for part in parts:
        nid, gpus = part["node"], list(part["gpus"])
        node = state.node_record(nid)
        if node["status"] != "up":
            raise Conflict(f"node {nid} is {node['status']}: no new jobs go there", code="node_not_up")
        if len(set(gpus)) != len(gpus):
            raise InvalidSpec(f"placement of {key} names a GPU twice: {gpus}")
        if wanted is not None and wanted != len(gpus):
            raise InvalidSpec(f"job {key} wants {wanted} GPUs, the placement gives {len(gpus)}")
        missing = sorted(set(gpus) - set(gpu_indices(node["resources"])))
        if missing:
            raise Conflict(f"node {nid} has no GPU {missing}", code="no_such_gpu")
        held = state.held_gpus(nid)
        busy = sorted(g for g in gpus if g in held)
        if busy:
            raise Conflict(f"GPU {busy} of node {nid} held by {held[busy[0]]}", code="gpu_busy",
                           hint="the leader plans again from the current state")
        state.active_index.check_room(job, nid, node)
    job = replace(job, state="starting", node=parts[0]["node"], gpu_ids=tuple(parts[0]["gpus"]),
                  attempts=job.attempts + 1, placed_term=term, waiting_for="", reason="", updated=cmd["ts"],
                  endpoint=None, parts=() if len(parts) == 1 else tuple(
                      JobPart(rank=rank, node=p["node"], gpu_ids=tuple(p["gpus"]), state="starting")
                      for rank, p in enumerate(parts)))
    state.active_index.activate(job)
    where = ", ".join(f"{state.name_of(p['node'])} ({_where(p['gpus'])})" for p in parts)
    job = state.put_job(moves.remember(
        job, cmd["ts"], f"placed on {where} by the leader of term {term}, attempt {job.attempts}"))
    return answer(job)


def update(state, cmd: dict, term: int) -> dict:
    key = cmd["job"]
    job = state.live_job(key)
    if "note" in cmd and set(cmd) <= _NOTE_FIELDS and cmd.get("attempt", 0) <= job.attempts:
        return note(state, job, cmd)         # a box's word, e.g. on a run the cluster replaced
    if "attempt" in cmd and cmd["attempt"] != job.attempts:
        raise Conflict(f"update for attempt {cmd['attempt']} of {key}, which is at attempt "
                       f"{job.attempts}", code="stale_attempt")
    if "note" in cmd:
        raise InvalidSpec("job.update: a note goes alone (with job, attempt and node)")
    if "rank" in cmd:
        job = state.put_job(moves.part_update(state, job, cmd))
        return answer(job)
    if "node" in cmd and cmd["node"] != job.node:
        raise Conflict(f"job {key} is placed on {job.node}, not {cmd['node']}", code="wrong_node")
    if "endpoint" in cmd:
        raise InvalidSpec("job.update: endpoint is set by rank 0 of a gang (with rank)")
    new, old = cmd.get("state"), job.state
    if new is not None and new != old:
        if new not in TRANSITIONS:
            raise InvalidSpec(f"{new!r} is not a job state")
        if new not in TRANSITIONS[old] and (old, new) not in REQUEUE:
            raise Conflict(f"job {key} is {old}; it cannot become {new}", code="bad_transition")
    if "output_version" in cmd:                  # before a rerun, which starts from it
        job = replace(job, output_version=cmd["output_version"])
    if "summary" in cmd:
        job = moves.with_summary(job, cmd["summary"])
    again = None
    if new is not None and new != old:
        why = cmd.get("reason") or ""
        silent = cmd.get("silent") or ()
        if new in ("unknown", "lost") and job.parts:     # the leader names the silent boxes of a gang
            job = replace(job, parts=tuple(replace(p, state=new, reason=why)
                                           if p.node in silent and p.state in ACTIVE_STATES else p
                                           for p in job.parts))
        again = moves.rerun(state, job, new, why, cmd["ts"])
        job = again if again is not None else moves.move(state, job, new, why, cmd["ts"])
    if cmd.get("stop_requested") and not job.stop_requested:
        job = moves.remember(job, cmd["ts"], f"stop requested: {cmd['stop_requested']}")
    changes: dict[str, Any] = {name: cmd[name] for name in ("waiting_for", "stop_requested")
                               + (() if again is not None else ("reason", "exit_code")) if name in cmd}
    job = state.put_job(replace(job, **changes, updated=cmd["ts"]))
    return answer(job)


def note(state, job: Job, cmd: dict) -> dict:
    """A line from a box in the job's history (e.g. it stopped a run the cluster replaced)."""
    who = state.name_of(cmd["node"]) if cmd.get("node") else "a box"
    job = state.put_job(replace(moves.remember(job, cmd["ts"], f"{who}: {cmd['note']}"), updated=cmd["ts"]))
    return answer(job)


def delete(state, cmd: dict, term: int) -> None:
    key = cmd["job"]
    if key not in state.jobs:
        archived = state.archive.drop(key, state.applying)
        if archived is not None:              # an archived job: its row goes
            if versions.at_least(state, 3):
                state_code.job_gone(state, key, archived.code_tree)
            return
    job = state.live_job(key)
    if job.state in ACTIVE_STATES:
        raise Conflict(f"job {key} is {job.state}", code="job_active", hint=f"stop it first: floyd stop {key}")
    state.drop_job(key)
    state.idem.pop(job.idem_key, None)
    if versions.at_least(state, 3):            # its code goes with its last job (issue 21)
        state_code.job_gone(state, key, job.code_tree)


def archive(state, cmd: dict, term: int) -> dict:
    """Move finished jobs (every part final) to the archive; any other named job stays
    (decided again here: the leader chose from an older state). Their idempotency keys
    move with them, so a retried submission still finds its job."""
    moved = []
    for key in cmd["jobs"]:
        job = state.jobs.get(key)
        if job is None or key in state.active_index or job.state not in FINAL_STATES \
                or any(p.state not in FINAL_STATES for p in job.parts):
            continue
        state.drop_job(key)
        if state.idem.get(job.idem_key) == ["job", key]:
            del state.idem[job.idem_key]
        state.archive.put(archived_form(job, state.applying))
        moved.append(key)
    return {"archived": moved}


def reserve(state, cmd: dict, term: int) -> int:
    """Number later jobs of a project above ``number`` (a node's own history from before
    it joined uses the numbers up to it)."""
    project, number = check_project(cmd["project"]), cmd["number"]
    if number < 0:
        raise InvalidSpec(f"project.reserve: number {number} is negative")
    state.counters[project] = max(state.counters.get(project, 0), number)
    return state.counters[project]


_NOTE_FIELDS = frozenset({"op", "ts", "job", "attempt", "node", "note", "proposer", "v"})
"""What a box's note on an older attempt may carry (nothing that changes the job)."""


def _where(gpus: list) -> str:
    return f"GPU {', '.join(map(str, gpus))}" if gpus else "CPU"

