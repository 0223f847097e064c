"""decide(): every combination of committed job, local record and runtime, checked directly."""

from __future__ import annotations

import itertools

import pytest

from floydd.jobs.decide import (BACK, GIVEN_UP, NEVER_STARTED, NO_RUN_HERE, EndLocal, Local, Report, ReportFinal,
                                ReportProgress, Start, Stop, call_off, decide)
from floydd.model import ACTIVE_STATES, FINAL_STATES, STATES, TRANSITIONS, Job, unsettled_on

ME, OTHER = "me", "other"
ATTEMPT = 2


def stored(state: str, *, gang: bool = False, mine: bool = True, part: str | None = None, stop: str = "",
           attempts: int = ATTEMPT) -> dict:
    """The job as the replicated state stores it."""
    node = ME if mine else OTHER
    placed = state != "queued"
    j = {"id": "p/1", "project": "p", "number": 1, "created": 1.0, "updated": 2.0, "spec": {}, "state": state,
         "attempts": attempts, "stop_requested": stop, "reason": "",
         "node": node if placed else None, "gpus": [0] if placed else [], "parts": []}
    if gang and placed:
        j["parts"] = [{"rank": 0, "node": OTHER, "gpus": [], "state": "running"},
                      {"rank": 1, "node": node, "gpus": [], "state": part or state}]
        j["node"] = OTHER
    return j


def job(state: str, **how) -> Job:
    return Job.from_dict(stored(state, **how))


JOBS = [None] + [job(s, gang=g, mine=m, part=p, stop=st)
                 for s in STATES for g in (False, True) for m in (True, False)
                 for p in ((None,) if not g else STATES) for st in ("", "stop now")]
LOCALS = [None] + [Local(s, a) for s in STATES for a in (0, ATTEMPT - 1, ATTEMPT, ATTEMPT + 1)]
CASES = list(itertools.product(JOBS, LOCALS, (False, True), (False, True)))


def _mine(j) -> dict | None:
    return None if j is None else j.part_on(ME)


def test_every_combination_keeps_the_rules():
    assert len(CASES) > 10_000
    for j, local, held, taken in CASES:
        try:
            _check_rules(j, local, held, taken)
        except AssertionError as exc:
            raise AssertionError(f"job {j}, local {local}, held {held}, gpus taken {taken}: {exc}") from None


def _check_rules(j, local, held, taken) -> None:
    actions = decide(j, local, ME, held=held, gpus_taken=taken)
    kinds = [type(a) for a in actions]
    part = _mine(j)
    assert len(set(kinds)) == len(kinds), "no action twice"
    assert not (Start in kinds and Stop in kinds)
    if Start in kinds:
        assert not taken, "never on a GPU another run here still holds"
        assert not held and part is not None and j.state in ACTIVE_STATES and part.state in ACTIVE_STATES
        assert local is None or local.attempt < j.attempts or (local.attempt == j.attempts
                                                                  and local.state == "queued")
        assert not j.stop_requested or local is None or local.attempt < j.attempts
        assert actions[0].replace == (local is not None and local.attempt < j.attempts)
    if Stop in kinds:
        assert held and local is not None and local.attempt != 0
    if local is not None and local.attempt == 0:                  # history: never run, stopped or reported here
        assert kinds in ([], [Report])
        if kinds:
            assert actions[0].state == "failed" and part.state in ACTIVE_STATES
    for a in actions:
        if isinstance(a, Report):
            assert part is not None and a.state in TRANSITIONS[part.state] or a.state == part.state
        if isinstance(a, ReportFinal):
            assert local.state in FINAL_STATES and local.attempt == j.attempts
            assert part.state in ACTIVE_STATES
        if isinstance(a, ReportProgress):
            assert local.state == "running" and part.state == "running" and part.rank in (None, 0)
        if isinstance(a, EndLocal):
            assert not held and local is not None and local.state not in FINAL_STATES
            assert a.state in FINAL_STATES
    if part is None and not held:
        assert actions == ()


@pytest.mark.parametrize("j,local,held,expected", [
    # placed here, nothing local yet: start it
    (job("starting"), None, False, (Start(replace=False),)),
    # an older attempt's record that ended: make the new one over it
    (job("starting"), Local("failed", ATTEMPT - 1), False, (Start(replace=True),)),
    # an older attempt still running here: stop it first (then start, next round)
    (job("starting"), Local("running", ATTEMPT - 1), True, (Stop("attempt 1 was replaced by attempt 2"),)),
    # a start cut short by a restart of the daemon
    (job("starting"), Local("queued", ATTEMPT), False, (Start(replace=False),)),
    (job("starting", stop="user"), Local("queued", ATTEMPT), False, (EndLocal("stopped", "user"),)),
    (job("starting"), Local("running", ATTEMPT), True, (Report("running"),)),
    (job("running"), Local("running", ATTEMPT), True, (ReportProgress(),)),
    (job("running", stop="user"), Local("running", ATTEMPT), True, (Stop("user"), ReportProgress())),
    (job("running"), Local("success", ATTEMPT), False, (ReportFinal(),)),
    (job("running"), Local("starting", ATTEMPT), True, ()),
    # given up (requeued or placed elsewhere) while running here
    (job("queued"), Local("running", ATTEMPT), True, (Stop(GIVEN_UP),)),
    (job("running", mine=False), Local("running", ATTEMPT), True, (Stop(GIVEN_UP),)),
    (None, Local("running", ATTEMPT), True, (Stop(GIVEN_UP),)),
    (None, Local("success", ATTEMPT), False, ()),
    # this node's history collides with a cluster job of the same number
    (job("starting"), Local("success", 0), False,
     (Report("failed", "this box already has a job p/1 from before it joined the cluster; submit it again"),)),
    (None, Local("running", 0), True, ()),
    # a gang ended by another part: settle this one
    (job("failed", gang=True, part="starting"), None, False, (Report("stopped", NEVER_STARTED),)),
    (job("failed", gang=True, part="running"), Local("running", ATTEMPT), True, (Stop("the job ended (failed)"),)),
    (job("failed", gang=True, part="running"), Local("stopped", ATTEMPT), False, (ReportFinal(),)),
    (job("failed", gang=True, part="starting"), Local("queued", ATTEMPT), False, (EndLocal("stopped", NEVER_STARTED),)),
    (job("failed", gang=True, part="stopped"), Local("stopped", ATTEMPT), False, ()),
    # a gang still running whose part here already ended: nothing more to say
    (job("running", gang=True, part="success"), Local("success", ATTEMPT), False, ()),
])
def test_the_table(j, local, held, expected):
    assert decide(j, local, ME, held=held) == expected


def test_a_part_whose_gpus_another_run_holds_waits_and_starts_once_they_are_free():
    assert decide(job("starting"), None, ME, held=False, gpus_taken=True) == ()
    assert decide(job("starting"), Local("queued", ATTEMPT), ME, held=False, gpus_taken=True) == ()
    assert decide(job("starting", stop="user"), Local("queued", ATTEMPT), ME, held=False, gpus_taken=True) == \
        (EndLocal("stopped", "user"),)
    assert decide(job("starting"), None, ME, held=False, gpus_taken=False) == (Start(replace=False),)


def test_unsettled_is_an_active_job_or_a_gang_part_still_active_here():
    assert unsettled_on(job("running"), ME) and not unsettled_on(job("running", mine=False), ME)
    assert not unsettled_on(job("success"), ME) and not unsettled_on(job("queued"), ME)
    assert unsettled_on(job("failed", gang=True, part="running"), ME)
    assert not unsettled_on(job("failed", gang=True, part="stopped"), ME)


def test_a_start_in_progress_is_called_off_when_the_cluster_no_longer_wants_it():
    assert call_off(job("starting"), ME, ATTEMPT) == ""
    assert call_off(job("running", gang=True, part="starting"), ME, ATTEMPT) == ""
    assert call_off(job("starting", stop="stopped by user"), ME, ATTEMPT) == "stopped by user"
    assert call_off(None, ME, ATTEMPT) == "the job was deleted"
    assert call_off(job("starting", attempts=ATTEMPT + 1), ME, ATTEMPT) == "attempt 2 was replaced by attempt 3"
    assert call_off(job("starting", mine=False), ME, ATTEMPT) == GIVEN_UP
    assert call_off(job("queued"), ME, ATTEMPT) == GIVEN_UP
    assert call_off(job("failed"), ME, ATTEMPT) == "the job ended (failed)"
    assert call_off(job("running", gang=True, part="stopped"), ME, ATTEMPT) == "this part of the job ended"


def test_call_off_agrees_with_decide_once_the_start_is_over():
    """Whenever a start would be called off, decide() (asked once it is over, the run held here)
    stops the run too: calling it off early changes when, never whether."""
    called_off = 0
    for j in JOBS:
        if call_off(j, ME, ATTEMPT):
            called_off += 1
            actions = decide(j, Local("running", ATTEMPT), ME, held=True)
            assert any(isinstance(a, Stop) for a in actions), (j, actions)
        elif j is not None and j.part_on(ME) is not None:
            assert not any(isinstance(a, Stop) for a in decide(j, Local("running", ATTEMPT), ME, held=True)), j
    assert called_off > 10


@pytest.mark.parametrize("j,local,held,expected", [
    # this box was out of touch and is back: it says what became of the run, never starts one
    (job("unknown"), Local("running", ATTEMPT), True, (Report("running", BACK),)),
    (job("unknown", stop="user"), Local("running", ATTEMPT), True, (Stop("user"), Report("running", BACK))),
    (job("unknown"), Local("success", ATTEMPT), False, (ReportFinal(),)),
    (job("unknown"), None, False, (Report("lost", NO_RUN_HERE),)),
    (job("unknown"), Local("failed", ATTEMPT - 1), False, (Report("lost", NO_RUN_HERE),)),
    (job("unknown"), Local("queued", ATTEMPT), False, (Report("lost", NO_RUN_HERE),)),
    (job("unknown"), Local("starting", ATTEMPT), True, ()),
    (job("unknown"), Local("running", ATTEMPT - 1), True, (Stop("attempt 1 was replaced by attempt 2"),)),
    # a gang whose part here was unknown: the same, for the part
    (job("unknown", gang=True, part="unknown"), Local("running", ATTEMPT), True, (Report("running", BACK),)),
    # the cluster gave the run up while this box was away: the box stops it on its return
    (job("queued"), Local("running", ATTEMPT), True, (Stop(GIVEN_UP),)),
    (job("running", attempts=ATTEMPT + 1), Local("running", ATTEMPT), True,
     (Stop("attempt 2 was replaced by attempt 3"),)),
])
def test_a_box_back_in_touch(j, local, held, expected):
    assert decide(j, local, ME, held=held, gpus_taken=True) == expected
