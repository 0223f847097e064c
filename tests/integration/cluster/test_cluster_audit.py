"""The audit chain is derived on apply on every box: the same entries, byte for byte, on each;
it survives a restart (the replay derives the same entries again) and a box that joins after
the log was compacted gets it with the snapshot, beside the archive.

Real raft drivers over mTLS, SQLite logs (floydd.cluster.state.audit, floydd.cluster.tables.audit_db).
"""

from __future__ import annotations

import asyncio

from floydd.cluster.state.audit import verify
from floydd.cluster.tables.audit_db import read_chain
from tests.harness.cluster import fast

SPEC = {"project": "m", "command": "true"}
CONFIG = fast(snapshot_every=30)


def _chain(node) -> list:
    return read_chain(node.service.state_dir / "raft.db")


async def _people_act(node, n: int) -> list[str]:
    keys = []
    for i in range(n):
        job = await node.service.submit_job(SPEC, f"a{i}", user="alice")
        await node.service.update_job(job["id"], state="stopped", stop_requested="alice asked", user="alice")
        await node.service.delete_job(job["id"], user="alice")
        keys.append(job["id"])
    return keys


async def test_every_box_holds_the_same_chain_and_a_late_box_gets_it_with_the_snapshot(make_cluster):
    cluster = make_cluster(CONFIG)
    nodes = await cluster.start(3)
    keys = await _people_act(nodes[1], 4)
    want = len(keys) * 3
    await cluster.wait_for(lambda: all(sum(e["who"] == "alice" for e in _chain(n)) == want for n in nodes),
                           timeout=20, what="every box to write alice's entries")
    chains = [_chain(n) for n in nodes]
    assert chains[0] == chains[1] == chains[2]
    assert verify(chains[0]) == (len(chains[0]), None)
    mine = [e for e in chains[0] if e["who"] == "alice"]
    assert [e["op"] for e in mine[:3]] == ["job.submit", "job.update", "job.delete"]
    assert mine[0]["box"] == nodes[1].service.node_id and f"job={keys[0]}" in mine[0]["what"]
    assert not any(e["op"] in ("node.health", "job.place", "dataset.holders") for e in chains[0])

    lead = await cluster.wait_leader()
    upto = lead.driver.status().applied
    await _people_act(lead, 12)                       # past snapshot_every: the log is compacted
    await cluster.wait_for(lambda: lead.driver.status().snapshot_index >= upto,
                           what="the leader's log compacted past the first entries")
    new = await cluster.join(via=nodes[0])
    await cluster.wait_for(lambda: _chain(new) and _chain(new) == _chain(lead), timeout=20,
                           what="the new box to hold the same chain as the leader")
    assert _chain(new)[0] == chains[0][0]
    assert verify(_chain(new))[1] is None


async def test_the_chain_survives_a_crash_and_the_replay_changes_no_entry(make_cluster):
    cluster = make_cluster(CONFIG)
    (node,) = await cluster.start(1)
    await _people_act(node, 3)
    await cluster.wait_for(lambda: sum(e["who"] == "alice" for e in _chain(node)) == 9, what="9 entries written")
    before = _chain(node)
    await cluster.kill(node)                          # no clean stop: the log is replayed on restart
    node = await cluster.restart(node)
    await cluster.wait_leader()
    await _people_act(node, 1)
    await cluster.wait_for(lambda: sum(e["who"] == "alice" for e in _chain(node)) == 12, what="3 more entries")
    after = _chain(node)
    assert after[:len(before)] == before
    assert verify(after) == (len(after), None)


async def test_a_box_cut_off_lists_the_changes_committed_without_it_once_it_catches_up(make_cluster):
    """``/v1/audit`` and ``/v1/people`` on any box show every change committed before the call: a
    box that has not heard of one yet waits to catch up rather than list its own older copy
    (``stale=1`` does)."""
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from floydd.api import audit as audit_api, keys, people as people_api

    cluster = make_cluster(fast(read_timeout=30.0))
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    behind = next(n for n in nodes if n is not lead)
    app = web.Application()
    app[keys.CLUSTER] = behind.service
    app.add_routes(audit_api.routes)
    app.add_routes(people_api.routes)
    async with TestClient(TestServer(app)) as client:
        cluster.isolate(behind)
        await _people_act(lead, 1)                      # committed by the other two boxes
        await lead.service.change_account({"op": "person.add", "name": "alice", "role": "admin", "uids": {},
                                           "user": "alice"})
        for path in ("/v1/audit", "/v1/people"):
            stale = await (await client.get(path, params={"stale": "1"})).json()
            assert not any("alice" in (e.get("who"), e.get("name")) for e in stale), (path, stale)
        audit, people = (asyncio.ensure_future(client.get(path)) for path in ("/v1/audit", "/v1/people"))
        done, _ = await asyncio.wait({audit, people}, timeout=1.0)  # the box cannot catch up while cut off
        assert not done, "a listing answered from a copy behind the cluster's"
        cluster.heal()
        resp = await asyncio.wait_for(audit, 30)
        assert resp.status == 200, await resp.text()
        assert [e["op"] for e in await resp.json() if e["who"] == "alice"] == ["job.submit", "job.update",
                                                                            "job.delete", "person.add"]
        resp = await asyncio.wait_for(people, 30)
        assert [p["name"] for p in await resp.json()] == ["alice"]
