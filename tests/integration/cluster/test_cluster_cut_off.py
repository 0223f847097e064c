"""A box cut off from the leader answers a write within seconds, saying so (issue 21), and
takes writes again once it is back in touch."""

from __future__ import annotations

import asyncio

import pytest

from floydd.cluster.net.leader_contact import LeaderUnreachable
from floydd.errors import Unavailable

SPEC = {"project": "cut", "command": "python train.py"}


async def test_a_cut_off_follower_refuses_a_write_within_seconds_naming_the_leader_and_takes_it_once_healed(cluster):
    nodes = await cluster.start(3)
    leader = await cluster.wait_leader()
    cut = next(n for n in nodes if n is not leader)
    await cut.service.submit_job(SPEC, "before")
    loop = asyncio.get_running_loop()
    hung = asyncio.Event()

    async def blackholed(cmd, timeout, **_kw):     # a forward over a link that is down hangs, as TCP does,
        hung.set()                                  # until the request's own time-out
        await asyncio.sleep(timeout + 1.0)
        raise Unavailable("no answer in time")
    real_forward = cut.service.transport.forward_propose
    cut.service.transport.forward_propose = blackholed
    cluster.isolate(cut)
    started = loop.time()
    with pytest.raises(LeaderUnreachable) as refused:
        await cut.service.submit_job(SPEC, "while-cut", timeout=30)
    took = loop.time() - started
    assert hung.is_set(), "the write went out and waited on the cut link"
    assert took < 4 * cluster.config.leader_lost_after + 1.0, f"answered after {took:.1f}s"
    assert refused.value.message.startswith("this box cannot reach the cluster's leader (last heard ")
    assert refused.value.code == "leader_unreachable"

    again = loop.time()                     # now it knows: the next write is refused at once
    with pytest.raises(LeaderUnreachable):
        await cut.service.submit_job(SPEC, "while-cut", timeout=30)
    assert loop.time() - again < 0.5
    majority = [n for n in nodes if n is not cut]
    lead = await cluster.wait_leader(among=majority)
    await lead.service.submit_job(SPEC, "majority")          # the others go on meanwhile

    cut.service.transport.forward_propose = real_forward
    cluster.heal()
    await cluster.wait_for(lambda: cut.driver.leader_unreachable() is None, timeout=20, what="the cut box back in touch")
    taken = await cut.service.submit_job(SPEC, "while-cut", timeout=10)
    assert taken["idem_key"] == "while-cut"
    await cluster.wait_for(lambda: len(lead.service.state.list_jobs()) == 3, what="the job applied on the leader")
    assert sorted(j.idem_key for j in lead.service.state.list_jobs()) == ["before", "majority", "while-cut"]


async def test_a_follower_whose_leader_dies_waits_for_the_election_instead_of_refusing(cluster):
    nodes = await cluster.start(3)
    old = await cluster.wait_leader()
    follower = next(n for n in nodes if n is not old)
    await cluster.kill(old)
    taken = await follower.service.submit_job(SPEC, "after-the-leader-died", timeout=10)
    assert taken["idem_key"] == "after-the-leader-died"
    assert follower.driver.leader_unreachable() is None


async def test_a_box_that_is_down_is_named_and_its_failure_said_in_words(cluster):
    nodes = await cluster.start(2)
    gone = nodes[1]
    await cluster.kill(gone)
    with pytest.raises(Unavailable) as refused:
        await nodes[0].service.transport.fetch(gone.id, "/cluster/v1/objects/" + "0" * 64, timeout=5)
    assert refused.value.message == (f"cannot reach {gone.name} at {gone.address}: connection refused "
                                     "(nothing listens on that port, or floydd is not running)")
