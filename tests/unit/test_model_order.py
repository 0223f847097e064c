"""The one rule a job listing is sorted and filtered by (:mod:`floydd.model.order`): the daemon's
``sort``/``q``, the TUI's jobs screen and its double all use it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from floydd.errors import UserError
from floydd.model import MAX_FILTER, JobOrder, filter_text, job_text, matching, ordered, run_seconds


def _job(number: int, state: str, project: str = "p", user: str = "", started=None, ended=None, created=None):
    return SimpleNamespace(id=f"{project}/{number}", number=number, state=state, project=project, user=user,
                           created=float(number) if created is None else created, started=started, ended=ended)


def test_a_sort_is_a_key_with_a_minus_for_descending_and_an_unknown_key_is_a_400():
    assert JobOrder.parse(None) == JobOrder.parse("") == JobOrder("created", True) and JobOrder().newest_first
    assert JobOrder.parse("state") == JobOrder("state", False) and str(JobOrder.parse("-time")) == "-time"
    assert JobOrder.parse("+user") == JobOrder("user", False) and not JobOrder.parse("created").newest_first
    for bad in ("size", "-", "--time", "State", "x" * 1000):
        with pytest.raises(UserError) as err:
            JobOrder.parse(bad)
        assert err.value.status == 400 and "created, state, project, user, time" in err.value.hint
        assert len(err.value.message) < 100


def test_ties_stay_newest_first_whichever_way_a_sort_goes():
    jobs = [_job(6, "success"), _job(5, "running"), _job(4, "success"), _job(3, "queued"), _job(2, "running"),
            _job(1, "failed")]                                               # newest first, as listed
    ids = lambda js: [j.number for j in js]
    assert ids(ordered(jobs, JobOrder.parse("state"), 0)) == [5, 2, 3, 1, 6, 4]
    assert ids(ordered(jobs, JobOrder.parse("-state"), 0)) == [6, 4, 1, 3, 5, 2]
    assert ids(ordered(jobs, JobOrder.parse("created"), 0)) == [1, 2, 3, 4, 5, 6]
    assert ids(ordered(jobs[::-1], JobOrder.parse("-created"), 0)) == [6, 5, 4, 3, 2, 1]


def test_time_is_how_long_it_ran_or_has_waited():
    done, running, queued = (_job(1, "success", started=10.0, ended=70.0), _job(2, "running", started=50.0),
                             _job(3, "queued", created=90.0))
    assert (run_seconds(10.0, 70.0, 1.0, 100.0), run_seconds(50.0, None, 1.0, 100.0),
            run_seconds(None, None, 90.0, 100.0), run_seconds(None, 5.0, 1.0, 100.0)) == (60.0, 50.0, 10.0, None)
    assert [j.number for j in ordered([queued, running, done], JobOrder.parse("-time"), 100.0)] == [1, 2, 3]


def test_a_filter_looks_in_id_state_user_node_command_and_params_case_aside():
    text = job_text("mnist/7", "running", "Alice", "gpu-box", "python Train.py", {"lr": 0.1})
    for needle in ("mnist/7", "runn", "alice", "gpu-b", "train.py", "lr=0.1"):
        assert matching([text], filter_text(needle.upper()), lambda t: t) == [text], needle
    assert matching([text], filter_text("bob"), lambda t: t) == []
    assert filter_text("  Bert \n") == "bert" and filter_text(None) == "" and filter_text("x" * MAX_FILTER)
    with pytest.raises(UserError):
        filter_text("x" * (MAX_FILTER + 1))
