"""Outages are not failures (DESIGN §5b): how the leader judges the boxes it lost touch with.

The leader hears from every member over raft (a round trip every 100 ms), so it knows within
seconds that a box went quiet; the box's own heartbeat in the state (every
``cluster_heartbeat``) is far too slow for that. Each round (:meth:`ClusterScheduler
.give_up_on_silent_nodes <floydd.jobs.leader.ClusterScheduler.give_up_on_silent_nodes>`)::

    a box not heard from for suspect_after (node_suspect_after, default 3 s)
        -> node.health suspect: nothing is placed there until the box's own next heartbeat,
           which reports its live processes (GPU fencing), makes it up again
    a job with a part on a box that is suspect (or no longer in the node table)
        not started yet              -> queued again, placed elsewhere within seconds
        started                      -> unknown: it may well run on; its GPUs stay held
        unknown for its lost_after   -> lost (``--lost-after``, else the cluster's
                                        ``job_lost_after``); its restart policy may rerun it
    a box that came back             -> it reports what became of its runs (the reconciler):
                                        running again, or how they ended
    a box cleanly off                -> keeps its jobs (its agents run on; it re-adopts them)

Only a leader that has led for ``suspect_after`` judges: a new leader has not heard from
anyone yet. The window of an ``unknown`` job runs from ``unknown_since`` (cluster time), so
a leader elected late judges a job some other leader made unknown by that same clock.
:func:`suspects` and :func:`judge` are pure (the state, ages and the time come in); the
leader proposes what they return.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from floydd.errors import InvalidSpec
from floydd.model import ACTIVE_STATES, RestartPolicy

__all__ = ["suspects", "answers", "troubled", "judge"]

_JUDGED = ("up", "draining")
"""Statuses a box's silence turns into ``suspect`` (``off`` is a clean stop: it stays off)."""


def suspects(nodes: Mapping[str, dict], silence: Mapping[str, float], suspect_after: float,
             now: float) -> list[str]:
    """Ids of the nodes listed up (or draining) that the leader has not heard from for
    ``suspect_after`` seconds (``silence``: node id -> seconds; a node missing from it has not
    been heard from since this leader was elected, and counts as silent that long) and whose
    last heartbeat or announcement in the state is as old (a box that just joined has not
    been heard over raft yet, but it has just said it is there)."""
    return sorted(nid for nid, node in nodes.items()
                  if node.get("status") in _JUDGED and silence.get(nid, float("inf")) >= suspect_after
                  and now - node.get("last_heartbeat", 0.0) >= suspect_after)


def answers(node: dict | None) -> bool:
    """A box that is up (or draining, or cleanly off: it keeps its jobs) is there."""
    return node is not None and node.get("status") in ("up", "draining", "off")


def troubled(nodes: Mapping[str, dict], busy: Iterable[str], silence: Mapping[str, float],
             suspect_after: float) -> set[str]:
    """The ``busy`` nodes whose jobs are judged: not answering (suspect, or gone from the node
    table) and still silent (a suspect box the leader hears from again is left alone until its
    heartbeat makes it up: what its reconciler reports meanwhile stands)."""
    return {nid for nid in busy
            if not answers(nodes.get(nid)) and silence.get(nid, float("inf")) >= suspect_after}


def judge(jobs: Iterable[dict], nodes: Mapping[str, dict], troubled: set[str], now: float,
          lost_after: float) -> list[tuple[str, dict]]:
    """``(job id, job.update fields)`` for each active job with a part on a ``troubled`` box
    (suspect, or gone from the node table): requeue it if no part started, else make it
    ``unknown``, and ``lost`` once it has been unknown for its window (``lost_after``: the
    cluster's default, for a job whose policy gives none)."""
    out = []
    for job in jobs:
        if job["state"] not in ACTIVE_STATES:
            continue
        silent = [nid for nid in _nodes_of(job) if nid in troubled]
        if not silent:
            continue
        name = ", ".join((nodes.get(nid) or {}).get("name") or nid for nid in silent)
        parts = job.get("parts") or ()
        # a gang whose parts have not started yet is placed again whole; once any part runs,
        # the run is unknown (its other parts run on, or fail when their peers vanish)
        started = job["state"] in ("running", "unknown") or any(p["state"] != "starting" for p in parts)
        fields: dict = {"attempt": job["attempts"], "silent": silent}
        if not started:
            fields.update(state="queued", reason=f"box {name} went silent before the job started")
        elif job["state"] != "unknown":
            fields.update(state="unknown", reason=f"box {name} is out of touch; the job may still run there")
        else:
            window = _window(job, lost_after)
            since = job.get("unknown_since") or job["updated"]
            if now - since < window:
                continue
            fields.update(state="lost", reason=f"box {name} was out of touch for {_seconds(now - since)} "
                                               f"(the job's lost-after window is {_seconds(window)})")
        out.append((job["id"], fields))
    return out


def _window(job: dict, default: float) -> float:
    try:
        policy = RestartPolicy.from_dict(job["spec"].get("restart"))
    except InvalidSpec:         # a spec this version cannot read: the cluster's default
        return default
    return default if policy.lost_after is None else policy.lost_after


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.1f} min"


def _nodes_of(job: dict) -> list[str]:
    """The nodes a placed job runs on: every part's for a gang."""
    return [p["node"] for p in job.get("parts") or ()] or [job["node"]]
