"""A box that hears from no leader forwards its command to the members it knows; while they
know no leader either (an election), it asks again until the time is up instead of giving up
at the first "not the leader" (a submit through such a box failed a CI run that way)."""

from __future__ import annotations

import asyncio

import pytest

from floydd.cluster.raft import ProposalDropped
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.writes import Commands
from floydd.errors import Forbidden, Unavailable


class _Config:
    propose_timeout = 2.0


class _Driver:
    leader_id = None

    async def propose(self, cmd, *, timeout=None, fenced=False):
        return {"through": "driver", **cmd}

    def leader_unreachable(self):       # a member cut off from the leader: tests/integration/cluster/test_cluster_cut_off
        return None

    async def unless_cut_off(self, awaitable, *, watch=True):
        return await awaitable


class _Transport:
    """Answers each forward with the next of ``answers`` (an exception is raised)."""

    def __init__(self, answers: list) -> None:
        self.answers, self.asked = list(answers), 0

    async def forward_propose(self, cmd, timeout, *, address=None, peer=None, forwarded=True):
        self.asked += 1
        answer = self.answers.pop(0) if self.answers else ProposalDropped("not the leader")
        if isinstance(answer, Exception):
            raise answer
        return answer, None

    def address_of(self, node):
        return None


def _Box(answers: list, contacts=("10.0.0.2:7654",)) -> Commands:
    return Commands(node_id="a" * 16, state=ClusterState(), driver=_Driver(), transport=_Transport(answers),
                    contacts=lambda: list(contacts), config=_Config(), clock=lambda: 1.0)


def _submit(box: Commands):
    return asyncio.run(box.submit_job({"command": "true"}, "k1", project="p", timeout=2.0))


def test_members_that_know_no_leader_yet_are_asked_again_until_one_takes_it():
    box = _Box([ProposalDropped("not the leader"), ProposalDropped("not the leader"), {"id": "p/1"}])
    assert _submit(box) == {"id": "p/1"} and box.transport.asked == 3


def test_once_this_box_hears_the_leader_it_proposes_through_its_driver():
    box = _Box([ProposalDropped("not the leader")])

    async def run():
        task = asyncio.create_task(box.submit_job({"command": "true"}, "k1", project="p", timeout=2.0))
        await asyncio.sleep(0)
        box.driver.leader_id = "b" * 16
        return await task
    assert asyncio.run(run())["through"] == "driver"


def test_it_gives_up_when_the_time_is_up_and_at_once_on_a_refusal_or_no_member_reachable():
    with pytest.raises(ProposalDropped, match="not the leader"):
        asyncio.run(_Box([]).submit_job({"command": "true"}, "k1", project="p", timeout=0.3))
    refused = _Box([Forbidden("node x is not a member yet")])
    with pytest.raises(Forbidden):
        _submit(refused)
    assert refused.transport.asked == 1
    away = _Box([Unavailable("cannot reach 10.0.0.2:7654")])
    with pytest.raises(Unavailable, match="cannot reach"):
        _submit(away)
    assert away.transport.asked == 1
