"""Three nodes in one loop: election, proposals from any node, reads, fencing, the wire."""

from __future__ import annotations

import aiohttp
import msgpack
import pytest

from floydd.cluster.state import versions
from floydd.cluster.raft import Heartbeat, ProposalDropped, encode_message
from floydd.cluster.net.transport import RAFT_PATH
from floydd.errors import Conflict, InvalidSpec, Unavailable
from floydd.security.tls import client_context
from tests.harness.cluster import PEER_HEADERS

SPEC = {"project": "mnist", "command": "python train.py", "resources": {"gpus": 1}}


async def test_three_nodes_elect_one_leader_that_every_node_follows(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    await cluster.wait_for(lambda: all(n.service.leader_id == lead.id for n in nodes), what="all follow")
    assert [n.service.is_leader for n in nodes].count(True) == 1
    st = lead.driver.status()
    assert st.voters == tuple(sorted(n.id for n in nodes)) and st.learners == ()
    assert all(len(ids) == 1 for ids in cluster.leaders_by_term().values())
    # every node announced itself: addresses, ports and resources are in the replicated state
    listed = {n["id"]: n for n in await nodes[0].service.nodes()}
    assert set(listed) == {n.id for n in nodes}
    assert listed[nodes[2].id]["cluster_port"] == nodes[2].port
    assert listed[nodes[2].id]["resources"] == {"gpus": [0, 1]} and listed[nodes[2].id]["health"] == "up"


async def test_a_submission_to_any_node_is_committed_once_and_seen_everywhere(cluster):
    nodes = await cluster.start(3)
    jobs = [await n.service.submit_job(SPEC, f"key-{n.name}") for n in nodes]
    assert [j["id"] for j in jobs] == ["mnist/1", "mnist/2", "mnist/3"]
    assert {j["origin"] for j in jobs} == {n.id for n in nodes}
    # a linearizable read on any node right after the acknowledgement sees every job
    for n in nodes:
        assert [j.id for j in await n.service.jobs()] == ["mnist/1", "mnist/2", "mnist/3"]
    # a retry with the same key, through another node, is the same job
    again = await nodes[2].service.submit_job({**SPEC, "command": "changed"}, "key-n1")
    assert again == jobs[0]
    assert len(await nodes[1].service.jobs()) == 3


async def test_placement_is_fenced_to_the_leader_and_never_double_books(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    follower = next(n for n in nodes if n is not lead)
    a = await follower.service.submit_job(SPEC, "a")
    b = await follower.service.submit_job(SPEC, "b")
    with pytest.raises(ProposalDropped) as exc:
        await follower.service.place(a["id"], follower.id, [0])
    assert exc.value.leader == lead.id
    placed = await lead.service.place(a["id"], follower.id, [0])
    assert (placed["state"], placed["placed_term"]) == ("starting", lead.driver.status().term)
    with pytest.raises(Conflict) as exc:
        await lead.service.place(b["id"], follower.id, [0])
    assert exc.value.code == "gpu_busy"
    # a leader action is never forwarded, not even with the leader's own term copied in
    forged = {"op": "job.place", "job": b["id"], "node": follower.id, "gpus": [1], "ts": 1.0,
              "term": lead.driver.status().term}
    with pytest.raises(InvalidSpec):
        await follower.service.transport.forward_propose(forged, 2.0, peer=lead.id)
    with pytest.raises(InvalidSpec):
        await follower.driver.propose(forged)
    assert (await follower.service.job(b["id"])).state == "queued"


async def test_each_node_sees_placements_through_its_apply_hook(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    target = next(n for n in nodes if n is not lead)
    seen = []
    target.service.on_apply(lambda e: seen.append(e.result) if e.command and e.command["op"] == "job.place"
                            and e.result and e.result["node"] == target.id else None)
    job = await nodes[0].service.submit_job(SPEC, "x")
    await lead.service.place(job["id"], target.id, [1])
    await cluster.wait_for(lambda: seen, what="the placement on its node")
    assert seen[0]["id"] == job["id"] and seen[0]["gpus"] == [1]
    done = await target.service.update_job(job["id"], state="running", node=target.id, attempt=1)
    assert done["state"] == "running"


async def test_a_restarted_node_replays_its_log_and_flags_the_replay(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    node = next(n for n in nodes if n is not lead)
    for i in range(3):
        await lead.service.submit_job(SPEC, f"r{i}")
    await cluster.wait_for(lambda: len(node.service.state.jobs) == 3)
    await cluster.kill(node)
    await lead.service.submit_job(SPEC, "while-down")
    node.service = cluster._service(node)
    seen = []
    node.service.on_apply(lambda e: seen.append((e.command["idem_key"], e.replay))
                          if e.command and e.command["op"] == "job.submit" else None)
    await cluster._listen(node)
    await node.service.start()
    node.alive = True
    await cluster.wait_for(lambda: len(seen) == 4, what="replay and catch-up")
    assert [key for key, _ in seen] == ["r0", "r1", "r2", "while-down"]
    flags = [replay for _, replay in seen]
    # replayed up to the commit index on disk (which may lag the last applied one), then new
    assert flags[0] and not flags[-1] and flags == sorted(flags, reverse=True)


async def test_a_cut_off_follower_serves_stale_reads_only(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    follower = next(n for n in nodes if n is not lead)
    cluster.isolate(follower)
    await lead.service.submit_job(SPEC, "after-cut")
    assert await follower.service.jobs(stale=True) == []
    with pytest.raises(Unavailable):
        await follower.driver.read(lambda s: s.list_jobs(), timeout=0.5)
    cluster.heal()
    assert [j.id for j in await follower.service.jobs()] == ["mnist/1"]


async def test_a_read_can_be_forwarded_to_the_leader(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    follower = next(n for n in nodes if n is not lead)
    await follower.service.submit_job(SPEC, "q")
    assert await follower.driver.query("counts", via_leader=True) == {"nodes": 3, "jobs": 1, "archived": 0,
                                                                                "datasets": 0}
    jobs = await follower.driver.query("jobs", {"project": "mnist"}, via_leader=True)
    assert [j["id"] for j in jobs] == ["mnist/1"]


async def test_a_member_cannot_send_raft_messages_as_another_node(cluster):
    nodes = await cluster.start(3)
    a, b, c = nodes
    term = c.driver.status().term + 5
    forged = encode_message(Heartbeat(frm=a.id, to=c.id, term=term, commit=0))
    ctx = client_context(b.identity, verify_node_id=True)
    async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
        for claimed in (a.id, b.id):    # body claims a / body honest but the message claims a
            body = msgpack.packb({"from": claimed, "addr": None, "msgs": [forged]})
            async with session.post(f"https://{c.address}{RAFT_PATH}", data=body, ssl=ctx,
                                    server_hostname=c.id, headers=PEER_HEADERS) as resp:
                assert resp.status == 403
    assert c.driver.status().term < term     # the forged heartbeat never reached the core


async def test_proposals_carry_msgpack_never_pickle(cluster):
    nodes = await cluster.start(1)
    await nodes[0].service.submit_job(SPEC, "p")
    storage = nodes[0].driver.persist.storage
    rows = await nodes[0].driver.persist.write(lambda: storage._db.execute("SELECT data FROM raft_log").fetchall())
    payloads = [bytes(r[0]) for r in rows if r[0]]
    assert payloads and all(not p.startswith(b"\x80") for p in payloads)   # pickle protocol marker
    assert any(msgpack.unpackb(p).get("op") == "job.submit" for p in payloads)
