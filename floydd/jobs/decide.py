"""What this node must do about one job: a pure decision, no I/O (the reconciler's brain).

Each node *reconciles* (level-triggered, like a kubelet): it compares what the cluster
committed about a job with its own record of it and its runtime, and acts on the
difference. :func:`decide` is that comparison, over plain values (the committed job typed:
:class:`~floydd.model.Job`), so every combination
is tested directly; :class:`~floydd.jobs.reconcile.Reconciler` carries the actions out.

    committed (my part)        local record here          runtime     actions
    ───────────────────        ─────────────────          ───────     ───────
    none / not here / queued   a run of the cluster's     holds it    Stop (given up or replaced)
    active                     none, or an older attempt  idle        Start (once no other run here
                                                                      holds its GPUs)
    active                     an older attempt           holds it    Stop (it was replaced)
    active, stop requested     not ended                  holds it    Stop
    active, stop requested     queued                     idle        EndLocal stopped
    active                     queued                     idle        Start (a start cut short)
    part unknown (this box     running                    holds it    Report running (back in touch:
      was out of touch)                                               the run went on)
    part unknown               ended                      -           ReportFinal (it ended meanwhile)
    part unknown               none, older, or queued     -           Report lost (no run of it here)
    part starting              running                    -           Report running
    part running, rank 0       running                    -           ReportProgress (metrics so far)
    part active                ended                      -           ReportFinal
    part active                from before it joined      -           Report failed (number taken)
    ended (a gang), my part    none or older attempt      -           Report stopped (never started)
      still active             queued                     idle        EndLocal stopped
                               ended                      -           ReportFinal
                               running                    holds it    Stop (the gang ended)

A local record of ``attempt`` 0 is a job from before this node joined its cluster (its
history): never started, stopped or reported here. A part the cluster calls ``unknown`` (this
box was out of touch) is never started: the box says what became of the run it had, and a
run the cluster replaced or gave up meanwhile is stopped (the reconciler notes that in the
job's history). ``gpus_taken`` covers every process on the part's GPUs that is not this
attempt's, including those of a run whose agent is gone (:mod:`floydd.runtime.fence`).

A job being started here (its inputs fetched, its workspace prepared, its environment
built: minutes, perhaps) is not decided about until the start is over; meanwhile
:func:`call_off` says whether that start must end before the job runs (a stop was
requested, the job ended or was deleted, another attempt replaced it), and the
reconciler tells the runtime at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from floydd.model import ACTIVE_STATES, FINAL_STATES, Job, JobPart

__all__ = ["Local", "Start", "Stop", "EndLocal", "Report", "ReportFinal", "ReportProgress", "Action", "decide",
           "call_off", "GIVEN_UP", "NEVER_STARTED", "BACK", "NO_RUN_HERE"]


@dataclass(frozen=True, slots=True)
class Local:
    """What decide needs of this node's record of a job."""

    state: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Start:
    """Make (``replace``: remake) the local record of this attempt, bring its inputs here, start it."""

    replace: bool


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the run the runtime holds."""

    reason: str


@dataclass(frozen=True, slots=True)
class EndLocal:
    """Settle a local record that never started: set it to ``state``."""

    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class Report:
    """Tell the cluster this part moved to ``state``."""

    state: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ReportFinal:
    """Tell the cluster how the local run ended: state, reason, exit code, metrics, /output."""


@dataclass(frozen=True, slots=True)
class ReportProgress:
    """Tell the cluster the metrics so far (the executor spaces these out)."""


Action = Union[Start, Stop, EndLocal, Report, ReportFinal, ReportProgress]

GIVEN_UP = "the cluster gave this run up while this box was out of touch (the job is placed anew or ended)"
NEVER_STARTED = "the job ended before this part started"
BACK = "this box is back in touch and the run went on"
NO_RUN_HERE = "this box is back in touch without this run (it never ran here, or its record is gone)"


def decide(job: Job | None, local: Local | None, node: str, *, held: bool,
           gpus_taken: bool = False) -> tuple[Action, ...]:
    """The actions that bring this node in line with the committed ``job`` (None: the cluster
    has no such job), given its ``local`` record (None: none), whether the runtime ``held``
    it (starting or running here), and whether another run here still holds one of the GPUs
    its part was given (``gpus_taken``: it starts only once they are free; the node is the
    final authority over its GPUs)."""
    part = job.part_on(node) if job is not None else None
    if local is not None and local.attempt == 0:                 # this node's own history
        if part is not None and part.state in ACTIVE_STATES:
            return (Report("failed", f"this box already has a job {job.id} from before it joined the "
                                     "cluster; submit it again"),)
        return ()
    if part is None or job.state == "queued":
        return (Stop(GIVEN_UP),) if held and local is not None else ()
    attempts = job.attempts
    if job.state in FINAL_STATES:
        return _ended(job, part, local, held)
    if part.state not in ACTIVE_STATES:       # this part of a gang is over; the others run on
        return (Stop("this part of the job ended"),) if held and local is not None else ()
    if part.state == "unknown":
        return _back(job, local, held)
    if local is None or local.attempt < attempts:
        if held:                        # an older attempt still runs here: stop it first
            return (Stop(f"attempt {local.attempt} was replaced by attempt {attempts}"),) if local else ()
        return () if gpus_taken else (Start(replace=local is not None),)
    if local.attempt > attempts:
        return ()
    stop = job.stop_requested
    if local.state == "queued" and not held:
        if stop:
            return (EndLocal("stopped", stop),)
        return () if gpus_taken else (Start(replace=False),)
    actions: list[Action] = []
    if stop and held and local.state not in FINAL_STATES:
        actions.append(Stop(stop))
    if local.state == "running" and part.state == "starting":
        actions.append(Report("running"))
    elif local.state == "running" and part.rank in (None, 0):
        actions.append(ReportProgress())
    elif local.state in FINAL_STATES:
        actions.append(ReportFinal())
    return tuple(actions)


def _back(job: Job, local: Local | None, held: bool) -> tuple[Action, ...]:
    """This box is back in touch and the cluster calls its part ``unknown``: say what became
    of the run (never start it: a start here would be a second run of the same attempt)."""
    attempts = job.attempts
    if local is not None and local.attempt > attempts:
        return ()
    if local is None or local.attempt < attempts:
        if held and local is not None:
            return (Stop(f"attempt {local.attempt} was replaced by attempt {attempts}"),)
        return () if held else (Report("lost", NO_RUN_HERE),)
    if local.state in FINAL_STATES:
        return (ReportFinal(),)
    if local.state == "running" and held:
        stop = job.stop_requested
        return ((Stop(stop),) if stop else ()) + (Report("running", BACK),)
    if local.state == "queued" and not held:
        return (Report("lost", NO_RUN_HERE),)
    return ()                                   # being started or re-adopted here: look again


def _ended(job: Job, part: JobPart, local: Local | None, held: bool) -> tuple[Action, ...]:
    """A gang that ended (its first part to stop ended it): settle this node's part."""
    mine_active = part.state in ACTIVE_STATES
    if local is None or local.attempt < job.attempts:
        if held and local is not None:
            return (Stop(_ended_why(job)),)
        return (Report("stopped", NEVER_STARTED),) if mine_active else ()
    if local.attempt > job.attempts:
        return ()
    if local.state in FINAL_STATES:
        return (ReportFinal(),) if mine_active else ()
    if held:
        return (Stop(_ended_why(job)),)
    if local.state == "queued":
        return (EndLocal("stopped", NEVER_STARTED),)
    return ()


def call_off(job: Job | None, node: str, attempt: int) -> str:
    """Why a start of ``attempt`` of ``job`` still in progress on ``node`` must end before the
    job runs ("" when it goes on): the reason it ends ``stopped`` with."""
    if job is None:
        return "the job was deleted"
    if job.attempts != attempt:
        return f"attempt {attempt} was replaced by attempt {job.attempts}"
    part = job.part_on(node)
    if part is None or job.state == "queued":
        return GIVEN_UP
    if job.stop_requested:
        return job.stop_requested
    if job.state in FINAL_STATES:
        return _ended_why(job)
    if part.state not in ACTIVE_STATES:
        return "this part of the job ended"
    return ""


def _ended_why(job: Job) -> str:
    return f"the job ended ({job.reason or job.state})"
