"""Autopilot's decisions, pure (no cluster): a view and a clock reading in, an action out.

(Kept beside the cluster tests that exercise the same rules end to end.)
"""

from __future__ import annotations

import pytest

from floydd.cluster.driver.autopilot import Action, AutopilotConfig, Member, View, decide, target_voters

CFG = AutopilotConfig(max_voters=5, grace=30.0, stabilize=5.0, contact_timeout=2.0)
NOW = 1000.0


def voter(node, *, heard=NOW, match=100, since=0.0):
    return Member(id=node, voter=True, match=match, last_contact=heard, contact_since=since)


def learner(node, *, heard=NOW, match=100, since=0.0):
    return Member(id=node, voter=False, match=match, last_contact=heard, contact_since=since)


def view(*members, leader="a", leader_since=0.0, commit=100, now=NOW):
    return View(leader=leader, now=now, leader_since=leader_since, commit=commit,
                members=(voter(leader), *members))


@pytest.mark.parametrize("in_contact,expected", [(1, 1), (2, 1), (3, 3), (4, 3), (5, 5), (6, 5), (9, 5)])
def test_the_target_is_at_most_five_voters_and_odd(in_contact, expected):
    assert target_voters(in_contact, 5) == expected
    assert target_voters(4, 5, prefer_odd=False) == 4


def test_a_healthy_cluster_is_left_alone():
    assert decide(view(voter("b"), voter("c"), learner("d")), CFG) is None


def test_a_voter_silent_past_the_grace_period_is_removed():
    v = view(voter("b"), voter("c", heard=NOW - 31), learner("d"))
    assert decide(v, CFG) == Action("remove", "c", decide(v, CFG).reason)
    assert "31s" in decide(v, CFG).reason


def test_within_the_grace_period_nothing_happens():
    assert decide(view(voter("b"), voter("c", heard=NOW - 29), learner("d")), CFG) is None


def test_grace_counts_from_when_this_leader_took_over():
    # never heard since a leader elected 10 s ago: not yet 30 s of silence for this leader
    v = view(voter("b"), Member(id="c", voter=True), learner("d"), leader_since=NOW - 10)
    assert decide(v, CFG) is None
    v = view(voter("b"), Member(id="c", voter=True), learner("d"), leader_since=NOW - 40)
    assert decide(v, CFG).op == "remove"


def test_no_removal_that_would_cost_the_quorum():
    # 3 voters, 2 silent: the one in contact is no quorum of 3, removal could not even commit
    assert decide(view(voter("b", heard=NOW - 100), voter("c", heard=NOW - 100)), CFG) is None
    # 2 voters, one silent: removing it needs its own vote
    assert decide(view(voter("b", heard=NOW - 100)), CFG) is None
    # 5 voters, 2 silent: 3 in contact are a quorum of 5 and of 4
    v = view(voter("b"), voter("c"), voter("d", heard=NOW - 100), voter("e", heard=NOW - 50))
    assert decide(v, CFG) == Action("remove", "d", decide(v, CFG).reason)


def test_a_caught_up_stable_learner_is_promoted_when_voters_are_short():
    v = view(voter("b"), learner("c", match=90), learner("d"))
    assert decide(v, CFG).op == "promote" and decide(v, CFG).node == "d"


def test_a_learner_behind_or_new_or_silent_is_not_promoted():
    assert decide(view(voter("b"), learner("c", match=99)), CFG) is None          # behind the commit
    assert decide(view(voter("b"), learner("c", since=NOW - 1)), CFG) is None     # not stable yet
    assert decide(view(voter("b"), learner("c", heard=NOW - 3)), CFG) is None     # not in contact


def test_odd_counts_are_preferred():
    # 2 in contact: one voter is better than two (either failing would stall two voters)
    assert decide(View(leader="a", now=NOW, leader_since=0, commit=100, members=(voter("a"), learner("b"))),
                  CFG) is None
    # 4 voters would not survive more failures than 3
    assert decide(view(voter("b"), voter("c"), learner("d")), CFG) is None
    # 6 in contact: five voters
    v = view(voter("b"), voter("c"), learner("d"), learner("e"), learner("f"))
    assert decide(v, CFG).op == "promote"


def test_more_than_five_voters_are_demoted_starting_with_the_least_useful():
    v = view(*(voter(x) for x in "bcde"), voter("f", match=50))
    assert decide(v, CFG) == Action("demote", "f", decide(v, CFG).reason)


def test_a_dead_learner_is_removed_after_the_grace_period():
    v = view(voter("b"), voter("c"), learner("d", heard=NOW - 100))
    assert decide(v, CFG).op == "remove" and decide(v, CFG).node == "d"


def test_dead_voters_go_before_promotions():
    v = view(voter("b"), voter("c", heard=NOW - 100), learner("d"))
    assert decide(v, CFG).op == "remove"
    after = view(voter("b"), learner("d"))
    assert decide(after, CFG).op == "promote"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        AutopilotConfig(max_voters=0)
