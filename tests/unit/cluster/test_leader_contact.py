"""When a box is cut off from the leader (writes refused at once) and when it only waits."""

from __future__ import annotations

from floydd.cluster.net.leader_contact import LeaderUnreachable, refusal, silent_for

VOTERS = ("a", "b", "c")


def _silent(*, now=100.0, leader=False, voters=VOTERS, members=VOTERS, heard=None, leader_heard=90.0, started=0.0):
    return silent_for(me="a", now=now, leader=leader, voters=voters, members=members, heard=heard or {},
                      leader_heard=leader_heard, started=started, after=2.0)


def test_a_box_that_hears_neither_the_leader_nor_a_majority_is_cut_off_and_says_since_when():
    assert _silent(heard={"b": 90.0, "c": 90.0}) == 10.0
    assert _silent(leader_heard=None, started=95.0) == 5.0      # never heard one: since it started


def test_a_recent_word_from_the_leader_is_not_a_cut():
    assert _silent(leader_heard=98.5) is None


def test_an_election_among_a_majority_it_reaches_is_waited_for():
    assert _silent(heard={"b": 99.0}) is None                   # a and b: 2 of 3
    assert _silent(voters=("a", "b", "c", "d", "e"), members=("a", "b", "c", "d", "e"),
                   heard={"b": 99.0}) == 10.0                    # 2 of 5 is no majority


def test_the_leader_a_box_alone_and_a_box_not_yet_a_member_are_never_cut_off():
    assert _silent(leader=True) is None
    assert _silent(voters=("a",), members=("a",)) is None
    assert _silent(members=("b", "c")) is None                  # joining: it asks the members it knows


def test_a_learner_counts_only_the_voters_it_hears():
    assert _silent(voters=("b", "c", "d"), members=("a", "b", "c", "d"), heard={"b": 99.5}) == 10.0
    assert _silent(voters=("b", "c", "d"), members=("a", "b", "c", "d"), heard={"b": 99.5, "c": 99.5}) is None


def test_the_refusal_says_how_long_and_what_to_do():
    refused = refusal(12.4, ever=True)
    assert isinstance(refused, LeaderUnreachable) and refused.code == "leader_unreachable"
    assert refused.message == "this box cannot reach the cluster's leader (last heard 12 s ago)"
    assert "floydd members" in refused.hint
    assert "none heard since this daemon started 3 s ago" in refusal(3.0, ever=False).message
