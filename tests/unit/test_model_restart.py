"""Restart policies in the job model: parsing, what reruns, the stored form and old specs."""

from __future__ import annotations

import msgspec
import pytest

from floydd.answers import decode_job
from floydd.errors import InvalidSpec
from floydd.model import JobKey, JobSpec, Restart, RestartPolicy, Submission, parse_duration


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("5m", 300), ("2h", 7200), ("1d", 86400),
                                          ("1.5m", 90), (45, 45), (0.5, 0.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "soon", "-5m", "0", "31d", "5 minutes", None, True, [1]])
def test_bad_durations_are_refused_with_a_hint(bad):
    with pytest.raises(InvalidSpec) as err:
        parse_duration(bad)
    assert "90s" in err.value.hint


def test_what_each_policy_reruns():
    assert [RestartPolicy(policy=p).reruns(s) for p in ("never", "on-failure", "on-lost")
            for s in ("failed", "lost", "timeout", "stopped")] == \
        [False, False, False, False, True, True, False, False, False, True, False, False]


@pytest.mark.parametrize("bad", [{"policy": "always"}, {"max_attempts": 0}, {"max_attempts": 101},
                                 {"lost_after": 0}, {"max_attempts": True}])
def test_a_bad_policy_is_refused(bad):
    with pytest.raises(InvalidSpec):
        RestartPolicy(**bad)


def test_a_submission_carries_its_policy_into_the_spec_and_an_old_spec_reads_the_default():
    sub = msgspec.convert({"project": "p", "command": "python t.py", "code_path": "/x", "restart": "never",
                           "max_attempts": 5, "lost_after": "10m"}, Submission)
    spec = sub.spec(code_tree="ab" * 32, data=())
    assert spec.restart == RestartPolicy(policy="never", max_attempts=5, lost_after=600.0)
    stored = spec.to_dict()
    assert stored["restart"] == {"policy": "never", "max_attempts": 5, "lost_after": 600.0}
    assert JobSpec.from_dict(stored) == spec
    old = {k: v for k, v in stored.items() if k != "restart"}
    assert JobSpec.from_dict(old).restart == RestartPolicy()
    with pytest.raises((InvalidSpec, msgspec.ValidationError)):
        msgspec.convert({"project": "p", "command": "x", "code_path": "/x", "restart": "sometimes"}, Submission)


def test_floyd_restart_keeps_the_policy_unless_told():
    old = {"command": "x", "code_tree": "ab" * 32, "data": [], "params": {}, "env": "default", "max_runtime": None,
           "resources": {"gpus": 0}, "restart": {"policy": "on-failure", "max_attempts": 4, "lost_after": 60.0}}
    old = decode_job({**old, "id": "p/1", "project": "p", "number": 1, "state": "success"})    # as shown
    kept = Restart().submission(JobKey("p", 1), old).restart_policy
    assert kept == RestartPolicy(policy="on-failure", max_attempts=4, lost_after=60.0)
    changed = Restart(restart="never", lost_after="2m").submission(JobKey("p", 1), old).restart_policy
    assert changed == RestartPolicy(policy="never", max_attempts=4, lost_after=120.0)
