"""Membership: join as a learner, clean leave, autopilot, crashed voters, snapshots, recover."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import msgpack
import pytest

from floydd.cluster.state import versions
from floydd.cluster.driver.autopilot import AutopilotConfig
from floydd.cluster.net.discovery import Peer
from floydd.cluster.net.transport import RAFT_PATH
from floydd.errors import Unavailable
from floydd.security.tls import client_context
from tests.harness.cluster import PEER_HEADERS

from tests.harness.cluster import fast

SPEC = {"project": "m", "command": "true"}


def roles(node) -> tuple[tuple, tuple]:
    st = node.driver.status()
    return st.voters, st.learners


async def test_a_new_node_joins_as_a_learner_and_gets_the_state(cluster):
    nodes = await cluster.start(3)
    for i in range(3):
        await nodes[i].service.submit_job(SPEC, f"k{i}")
    new = await cluster.join(via=nodes[1])
    lead = await cluster.wait_leader()
    await cluster.wait_for(lambda: new.id in roles(lead)[1], what="the learner seat")
    await cluster.wait_for(lambda: len(new.service.state.jobs) == 3, what="the state on the learner")
    assert new.id not in roles(lead)[0]     # 4 nodes: 3 voters (odd), the 4th stays a learner
    assert new.service.state.nodes[new.id]["address"] == "127.0.0.1"
    # the learner serves linearizable reads and forwards submissions like any node
    job = await new.service.submit_job(SPEC, "from-learner")
    assert job["id"] == "m/4" and len(await new.service.jobs()) == 4
    members = {m["id"]: m for m in new.service.members()}
    assert members[new.id]["role"] == "learner" and members[lead.id]["leader"]


async def test_a_node_found_by_discovery_joins_through_it(cluster):
    nodes = await cluster.start(3)
    new = await cluster.new_node()
    # what zeroconf reports: a peer with its id, and a static seed whose id is not known yet
    new.service.on_discovered([Peer(node_id=nodes[0].id, addresses=("127.0.0.1",), port=nodes[0].port),
                               Peer(node_id=None, addresses=("127.0.0.1",), port=nodes[1].port, source="seed")])
    assert new.service.transport.address_of(nodes[0].id) == nodes[0].address
    await new.service.start()
    new.alive = True
    lead = await cluster.wait_leader()
    await cluster.wait_for(lambda: new.id in roles(lead)[1], what="a learner seat via discovery")
    await cluster.wait_for(lambda: new.id in new.service.state.nodes, what="the node's own record")


async def test_a_clean_shutdown_hands_over_leadership_and_a_learner_is_promoted(cluster):
    await cluster.start(3)
    spare = await cluster.join()
    old = await cluster.wait_leader()
    await cluster.wait_for(lambda: spare.id in roles(old)[1], what="the learner seat")
    term = old.driver.status().term
    await cluster.stop(old)                       # transfer leadership, then leave the voters
    rest = [n for n in cluster.live()]
    new = await cluster.wait_leader(among=rest, timeout=5)
    assert new.driver.status().term == term + 1, "leadership was handed over, not lost to a timeout"
    assert old.id not in roles(new)[0] + roles(new)[1]
    # (on a loaded machine the new leader may drop the learner before hearing from it; it then
    # asks for its seat again, so allow for that round trip)
    # and a voter it missed for a moment on a busy box is dropped and comes back the same way
    await cluster.wait_for(lambda: spare.id in roles(new)[0] and len(roles(new)[0]) == 3, timeout=10,
                           what="autopilot to promote the learner, three voters")
    assert (await new.service.submit_job(SPEC, "after"))["id"] == "m/1"
    assert new.service.state.nodes[old.id]["status"] == "off"


async def test_turning_voters_off_one_by_one_never_loses_quorum(cluster):
    nodes = await cluster.start(3)
    for n in nodes[:2]:
        await cluster.stop(n)
        survivors = cluster.live()
        lead = await cluster.wait_leader(among=survivors, timeout=5)
        assert (await survivors[0].service.submit_job(SPEC, f"after-{n.name}"))["state"] == "queued"
        assert roles(lead)[0] == tuple(sorted(s.id for s in survivors))
    # the first box comes back: it asks for a learner seat and is promoted (2 in contact -> 1 voter
    # is enough; prefer odd), it has the whole history either way
    back = await cluster.restart(nodes[0])
    lead = await cluster.wait_leader(timeout=5)
    await cluster.wait_for(lambda: back.id in roles(lead)[0] + roles(lead)[1], timeout=5, what="rejoin")
    await cluster.wait_for(lambda: len(back.service.state.jobs) == 2, what="the history on the returning box")


async def test_a_crashed_voter_is_removed_after_the_grace_period_and_a_learner_promoted(cluster):
    nodes = await cluster.start(3)
    spare = await cluster.join()
    lead = await cluster.wait_leader()
    await cluster.wait_for(lambda: spare.id in roles(lead)[1], what="the learner seat")
    victim = next(n for n in nodes if n is not lead)
    await cluster.kill(victim)
    await cluster.wait_for(lambda: victim.id not in roles(lead)[0], timeout=6, what="removal after 1 s grace")
    await cluster.wait_for(lambda: spare.id in roles(lead)[0], timeout=5, what="promotion")
    assert sorted(roles(lead)[0]) == sorted(n.id for n in cluster.live())
    # it comes back: a learner again (3 voters in contact already), with the whole history
    await lead.service.submit_job(SPEC, "while-away")
    back = await cluster.restart(victim)
    await cluster.wait_for(lambda: back.id in roles(lead)[1], timeout=5, what="the returning box as learner")
    await cluster.wait_for(lambda: len(back.service.state.jobs) == 1, what="catch-up")


async def test_a_learner_dropped_while_cut_off_asks_for_its_seat_again(cluster):
    # the leader removes a learner it cannot reach after the grace period and never tells it
    # (it is no longer sent anything); the learner still lists itself and must notice by the
    # leader's silence alone
    await cluster.start(3)
    spare = await cluster.join()
    lead = await cluster.wait_leader()
    await cluster.wait_for(lambda: spare.id in roles(lead)[1] and spare.id in roles(spare)[1],
                           what="the learner seat, on both sides")
    cluster.isolate(spare)
    await cluster.wait_for(lambda: spare.id not in roles(lead)[1], timeout=6, what="removal after 1 s grace")
    assert spare.id in roles(spare)[1], "the dropped learner cannot know it was dropped"
    await lead.service.submit_job(SPEC, "while-dropped")
    cluster.heal()
    await cluster.wait_for(lambda: spare.id in roles(lead)[1], timeout=5, what="the learner seat again")
    await cluster.wait_for(lambda: len(spare.service.state.jobs) == 1, what="catch-up")


async def test_autopilot_never_removes_a_voter_when_that_would_cost_the_quorum(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    others = [n for n in nodes if n is not lead]
    await cluster.kill(others[0])
    await cluster.wait_for(lambda: others[0].id not in roles(lead)[0], timeout=6, what="first removal")
    await cluster.kill(others[1])       # 2 voters, one dead: removing it would need its vote
    with pytest.raises(Unavailable):
        await lead.service.submit_job(SPEC, "no-quorum", timeout=2.5)
    assert others[1].id in roles(lead)[0]


async def test_a_lagging_node_is_brought_up_by_a_snapshot_after_compaction(make_cluster):
    cluster = make_cluster(fast(autopilot=AutopilotConfig(grace=60, stabilize=0.2, contact_timeout=0.5)))
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    laggard = next(n for n in nodes if n is not lead)
    await cluster.kill(laggard)
    for i in range(260):                        # snapshot_every=200 in the test preset
        await lead.service.submit_job(SPEC, f"bulk-{i}")
    await cluster.wait_for(lambda: lead.driver.status().snapshot_index > 1, what="a compaction")
    await cluster.restart(laggard)
    await cluster.wait_for(lambda: len(laggard.service.state.jobs) == 260, timeout=10, what="catch-up")
    await cluster.wait_for(lambda: laggard.driver.status().applied == lead.driver.status().applied)
    assert laggard.service.state.snapshot() == lead.service.state.snapshot()
    assert laggard.driver.status().snapshot_index > 1          # it got there by the leader's snapshot
    assert laggard.id in roles(lead)[0]


async def test_recover_turns_a_survivor_into_a_new_one_node_cluster_loudly(cluster, caplog):
    nodes = await cluster.start(3)
    survivor = await cluster.wait_leader()
    nodes.remove(survivor)
    nodes.insert(0, survivor)
    for i in range(3):
        await nodes[i].service.submit_job(SPEC, f"k{i}")
    await cluster.wait_for(lambda: len(survivor.service.state.jobs) == 3)
    for n in nodes[1:]:
        await cluster.kill(n)
    with pytest.raises(Unavailable):
        await survivor.service.submit_job(SPEC, "stuck", timeout=1.0)
    await cluster.kill(survivor)
    with caplog.at_level(logging.WARNING, logger="floydd.cluster"):
        await cluster.restart(survivor, recover=True)
    assert any("RECOVER" in r.getMessage() and "NEW single-node cluster" in r.getMessage() for r in caplog.records)
    await cluster.wait_for(lambda: survivor.service.is_leader, timeout=3, what="the survivor to lead alone")
    assert roles(survivor) == ((survivor.id,), ())
    job = await survivor.service.submit_job(SPEC, "after-recover")
    keys = [j.idem_key for j in await survivor.service.jobs()]
    # "stuck" went into the log of the (then still) leader uncommitted: recover keeps it, as etcd does
    assert keys in (["k0", "k1", "k2", "stuck", "after-recover"], ["k0", "k1", "k2", "after-recover"])
    assert job["id"] == f"m/{len(keys)}"
    assert set(survivor.service.state.removed) == {n.id for n in nodes[1:]}
    assert not survivor.service.listener.is_member_cert(nodes[1].id)


async def test_a_node_that_left_for_good_is_refused(cluster):
    nodes = await cluster.start(3)
    gone = nodes[2]
    await gone.service.leave()
    gone.alive = False
    await gone.service.close()          # the daemon's cleanup still runs after `floydd leave`: harmless
    lead = await cluster.wait_leader(among=nodes[:2])
    await cluster.wait_for(lambda: gone.id in lead.service.state.removed, what="the tombstone")
    assert gone.id not in roles(lead)[0] + roles(lead)[1]
    ctx = client_context(gone.identity, verify_node_id=True)
    body = msgpack.packb({"from": gone.id, "addr": None, "msgs": []})
    async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
        async with session.post(f"https://{lead.address}{RAFT_PATH}", data=body, ssl=ctx,
                                server_hostname=lead.id, headers=PEER_HEADERS) as resp:
            assert resp.status == 403
            assert (await resp.json())["error"]["code"] == "not_a_member"



async def test_a_leader_alone_stops_its_clock_and_starts_it_again_when_a_node_joins(cluster):
    """Issue 23: a one-voter raft needs no ticks (no election can happen, nobody waits for its
    heartbeats) nor autopilot rounds; a learner that joins needs both again."""
    (node,) = await cluster.start(1)
    driver = node.service.driver
    ticks = [0]
    submit = driver.submit

    def counted(fn) -> None:
        if fn == driver.node.tick:
            ticks[0] += 1
        submit(fn)
    driver.submit = counted
    await cluster.wait_for(lambda: driver.alone and node.service.alone, what="the leader alone")
    alone_at = ticks[0]
    await node.service.submit_job(SPEC, "k-alone")          # a write does not start the clock
    await asyncio.sleep(5 * driver.config.raft.tick_interval_ms / 1000)   # a window to see no tick in
    assert driver.alone and ticks[0] == alone_at
    new = await cluster.join(via=node)
    await cluster.wait_for(lambda: new.id in roles(node)[1], what="the learner seat")
    assert not driver.alone and not node.service.alone
    await cluster.wait_for(lambda: ticks[0] >= alone_at + 10, what="the clock running again")
    await cluster.wait_for(lambda: new.service.driver.leader_id == node.id, what="the learner hears the leader")
    assert new.service.driver.leader_silent_for() < driver.config.leader_lost_after
