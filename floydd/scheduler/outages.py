"""Outages are not failures (DESIGN §5b): how the leader judges the boxes it lost touch with.

The leader hears from every member over raft (a round trip every 100 ms), so it knows within
seconds that a box went quiet; the box's own heartbeat in the state (every
``cluster_heartbeat``) is far too slow for that. How long a box has been quiet is measured
on the leader's own monotonic clock from when it last heard from it, over raft or by
applying the box's own entry (:mod:`floydd.cluster.heard`): never by comparing a ``ts`` the
box's wall clock wrote with the leader's, which made a box whose clock ran ahead never go
quiet and one running behind look gone (issue 21). Each round (:meth:`ClusterScheduler
.give_up_on_silent_nodes <floydd.scheduler.placer.ClusterScheduler.give_up_on_silent_nodes>`)::

    a box up (or draining) quiet for suspect_after (node_suspect_after, default 3 s)
        -> node.health suspect: nothing is placed there until the box's own next heartbeat,
           which reports its live processes (GPU fencing), makes it up again
    a job with a part on a box that is suspect, or no longer in the node table, and quiet
    for suspect_after
        not started yet              -> queued again, placed elsewhere within seconds
        started                      -> unknown: it may well run on; its GPUs stay held
        unknown, and the box quiet for its lost_after
                                     -> lost (``--lost-after``, else the cluster's
                                        ``job_lost_after``); its restart policy may rerun it
    a job on a box cleanly off (``floydd stop``)
        the box off for less than its lost_after
                                     -> kept as it is: its agents run on, and a box that
                                        starts again (a restart, an upgrade) re-adopts them
        off for its lost_after       -> lost (not started: queued again), as above
    a box that came back             -> it reports what became of its runs (the reconciler):
                                        running again, or how they ended

So a box stopped for maintenance that never comes back (the machine died) ends in a
decision too; its jobs no longer stay ``running`` for ever. One that should stay away longer
than its jobs' windows is drained first (``floydd drain --wait``: its jobs are done before
it stops).

Only a leader that has led for ``suspect_after`` judges: a new leader has not heard from
anyone yet, and counts a box's quiet from when it took over (raft) or from when it started
(its own entries): a window is never shortened by a change of leader, only restarted.
:func:`quiet`, :func:`suspects`, :func:`troubled` and :func:`judge` are pure (the state and
the ages come in); the leader proposes what they return.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from floydd.model import ACTIVE_STATES, Job

__all__ = ["quiet", "suspects", "answers", "troubled", "judge"]

_JUDGED = ("up", "draining")
"""Statuses a box's silence turns into ``suspect`` (``off`` is a clean stop: it stays off)."""

_NEVER = float("inf")


def quiet(nodes: Iterable[str], silence: Mapping[str, float], ages: Mapping[str, float]) -> dict[str, float]:
    """Node id -> seconds since the leader last heard from it by any road: over raft
    (``silence``, members only) or by applying its own entry (``ages``), whichever is more
    recent; both on the leader's monotonic clock. Infinite for a node heard by neither."""
    return {nid: min(silence.get(nid, _NEVER), ages.get(nid, _NEVER)) for nid in nodes}


def suspects(nodes: Mapping[str, dict], quiet: Mapping[str, float], suspect_after: float) -> list[str]:
    """Ids of the nodes listed up (or draining) that the leader has not heard from for
    ``suspect_after`` seconds (:func:`quiet`: a box that just joined has not been heard over
    raft yet, but its announcement was applied just now)."""
    return sorted(nid for nid, node in nodes.items()
                  if node.get("status") in _JUDGED and quiet.get(nid, _NEVER) >= suspect_after)


def answers(node: dict | None) -> bool:
    """A box that is up (or draining) is there; one suspect, cleanly off or removed is not."""
    return node is not None and node.get("status") in _JUDGED


def troubled(nodes: Mapping[str, dict], busy: Iterable[str], quiet: Mapping[str, float],
             suspect_after: float) -> dict[str, float]:
    """The ``busy`` nodes whose jobs are judged, with how long each has been quiet: not
    answering (suspect, cleanly off, or gone from the node table) and still quiet (a suspect
    box the leader hears from again is left alone until its heartbeat makes it up: what its
    reconciler reports meanwhile stands)."""
    out = {}
    for nid in busy:
        silent = quiet.get(nid, _NEVER)
        if not answers(nodes.get(nid)) and silent >= suspect_after:
            out[nid] = silent
    return out


def judge(jobs: Iterable[Job], nodes: Mapping[str, dict], troubled: Mapping[str, float],
          lost_after: float) -> list[tuple[str, dict]]:
    """``(job id, job.update fields)`` for each active job with a part on a ``troubled`` box
    (node id -> seconds quiet): requeue it if no part started, else make it ``unknown``, and
    ``lost`` once one of its boxes has been quiet for its window (``lost_after``: the
    cluster's default, for a job whose policy gives none)."""
    out = []
    for job in jobs:
        if job.state not in ACTIVE_STATES:
            continue
        silent = [nid for nid in _nodes_of(job) if nid in troubled]
        if not silent:
            continue
        name = ", ".join((nodes.get(nid) or {}).get("name") or nid for nid in silent)
        # a gang whose parts have not started yet is placed again whole; once any part runs,
        # the run is unknown (its other parts run on, or fail when their peers vanish)
        started = job.state in ("running", "unknown") or any(p.state != "starting" for p in job.parts)
        fields: dict = {"attempt": job.attempts, "silent": silent}
        window, for_s = _window(job, lost_after), max(troubled[nid] for nid in silent)
        took = "" if for_s == _NEVER else f" for {_seconds(for_s)}"
        if all((nodes.get(nid) or {}).get("status") == "off" for nid in silent):
            # stopped cleanly: its agents run on and it re-adopts them when it starts again (a
            # restart, an upgrade), so its jobs stay as they are until the window has passed
            if for_s < window:
                continue
            fields.update(state="lost" if started else "queued",
                          reason=f"box {name} was stopped (off) and not back{took} "
                                 f"(the job's lost-after window is {_seconds(window)})")
        elif not started:
            fields.update(state="queued", reason=f"box {name} went silent before the job started")
        elif job.state != "unknown":
            fields.update(state="unknown", reason=f"box {name} is out of touch; the job may still run there")
        else:
            if for_s < window:
                continue
            fields.update(state="lost", reason=f"box {name} was out of touch{took} "
                                               f"(the job's lost-after window is {_seconds(window)})")
        out.append((job.id, fields))
    return out


def _window(job: Job, default: float) -> float:
    if job.spec is None:        # a spec this version cannot read: the cluster's default
        return default
    lost_after = job.spec.restart.lost_after
    return default if lost_after is None else lost_after


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value < 120 else f"{value / 60:.1f} min"


def _nodes_of(job: Job) -> list[str]:
    """The nodes a placed job runs on: every part's for a gang."""
    return [p.node for p in job.parts] or [job.node]
