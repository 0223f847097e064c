"""Membership is the trust boundary: in-process boxes on loopback, real mTLS, real raft.

A certificate the CA signed but whose node never joined is refused everywhere but where it
may announce itself; a removed node's is refused; a member speaking for another box, or for a
user on someone else's job, is refused on every box alike.
"""

from __future__ import annotations

import json
import time

import aiohttp
import msgpack
import pytest

from floydd.cluster.raft import AppendEntries, Heartbeat, HeartbeatResponse, encode_message
from floydd.cluster.net.transport import PROPOSE_PATH, RAFT_PATH, READ_PATH
from floydd.errors import Forbidden
from floydd.security.identity import NodeIdentity
from floydd.security.tls import client_context
from tests.harness.cluster import PEER_HEADERS
from floydd.security.tokens import new_token

SPEC = {"project": "m", "command": "true"}


def outsider(cluster, name: str) -> NodeIdentity:
    """A process holding a certificate of this cluster that never announced itself: not a
    member (see :func:`redeemed` for the record a real join leaves first)."""
    identity = NodeIdentity.load_or_create(cluster.root / name / "tls")
    identity.install(cluster.ca.issue_node_cert(identity.make_csr(), identity.node_id, ["127.0.0.1"]),
                     cluster.ca.cert_pem)
    return identity


async def redeemed(cluster, lead, identity: NodeIdentity, made_by: str = "test") -> str:
    """Commit what a voter commits before it hands out a join's certificate: the token it was
    given, used by ``identity``'s node with its serial (floydd.daemon.joining); the token's id."""
    token = new_token(cluster.ca.fingerprint, 600, time.time())
    digest = token.secret_sha256
    await lead.service._propose({"op": "token.create", "id": token.token_id, "secret_sha256": digest,
                                 "expires": token.expires_at, "made_by": made_by, "made_on": lead.id})
    await lead.service._propose({"op": "token.use", "id": token.token_id, "secret_sha256": digest,
                                 "node": identity.node_id, "serial": identity.serial,
                                 "not_after": identity.not_after})
    await cluster.wait_for(lambda: all(identity.node_id in n.service.state.trust.certs for n in cluster.nodes),
                           what="the used token recorded everywhere")
    return token.token_id


async def post(identity: NodeIdentity, node, path: str, body: dict) -> tuple[int, dict]:
    ctx = client_context(identity, verify_node_id=True)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"https://{node.address}{path}", data=msgpack.packb(body, use_bin_type=True),
                                ssl=ctx, server_hostname=node.id,
                                headers={**PEER_HEADERS, "Content-Type": "application/msgpack"}) as resp:
            raw = await resp.read()
            try:
                return resp.status, msgpack.unpackb(raw, raw=False)
            except Exception:           # the peer-certificate guard answers JSON
                return resp.status, json.loads(raw)


async def open_stream(identity: NodeIdentity, node) -> int:
    """Open the raft stream to ``node`` as ``identity``: 101 (opened), else the refusal's status."""
    async with aiohttp.ClientSession(headers=PEER_HEADERS) as session:
        try:
            ws = await session.ws_connect(f"https://{node.address}{RAFT_PATH}", params={"from": identity.node_id},
                                          ssl=client_context(identity, verify_node_id=True), server_hostname=node.id)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status
        await ws.close()
        return 101


async def test_a_certificate_that_never_joined_cannot_lead_append_propose_or_read(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    rogue = outsider(cluster, "rogue")
    await redeemed(cluster, lead, rogue)
    terms = {n.id: n.driver.status().term for n in nodes}
    for n in nodes:
        heartbeat = AppendEntries(frm=rogue.node_id, to=n.id, term=terms[n.id] + 100, log_term=0, index=0,
                                  entries=(), commit=0)
        status, answer = await post(rogue, n, RAFT_PATH, {"from": rogue.node_id, "addr": None,
                                                          "msgs": [encode_message(heartbeat)]})
        assert status == 403 and answer["error"]["code"] == "not_a_member"
        assert await open_stream(rogue, n) == 403
        status, _ = await post(rogue, n, READ_PATH, {"from": rogue.node_id, "query": "jobs", "args": {}})
        assert status == 403
        cmd = {"op": "job.submit", "idem_key": "evil", "project": "m", "spec": {"command": "id"}, "ts": 1.0,
               "origin": n.id, "user": "alice"}
        status, answer = await post(rogue, n, PROPOSE_PATH, {"from": rogue.node_id, "cmd": cmd, "timeout": 2})
        assert status == 403 and "not a member" in answer["error"]["message"]
    assert (await lead.service.submit_job(SPEC, "after"))["id"] == "m/1"      # nothing stalled
    for n in nodes:
        st = n.driver.status()
        assert st.term == terms[n.id] and st.leader == lead.id, "the impostor's term changed nothing"
        assert rogue.node_id not in n.service.state.nodes
    await cluster.wait_for(lambda: all([j.idem_key for j in n.service.state.jobs.values()] == ["after"]
                                       for n in nodes), what="only the members' job, everywhere")


async def test_a_new_box_completes_its_join_by_announcing_itself_through_a_follower(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    follower = next(n for n in nodes if n is not lead)
    new = await cluster.join(via=follower)           # knows only the follower's address
    await cluster.wait_for(lambda: new.id in lead.driver.status().learners, what="its learner seat")
    record = lead.service.state.nodes[new.id]
    assert record["name"] == new.name
    # the follower did not relay it: the new box spoke to the leader itself, so it is the proposer
    assert (await new.service.submit_job(SPEC, "from-new"))["origin"] == new.id


async def test_a_removed_member_is_refused_everywhere(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    await lead.service.grant_admin("root")
    await cluster.sign_in("root")
    victim = next(n for n in nodes if n is not lead)
    rest = [n for n in nodes if n is not victim]
    with pytest.raises(Forbidden, match="not an admin"):
        await rest[0].service.remove_node(victim.id, user="mallory")
    # the victim's raft stream to each other box opened (by a stale answer, which raft ignores)
    victim.service.transport.send([HeartbeatResponse(frm=victim.id, to=n.id, term=0) for n in rest])
    await cluster.wait_for(lambda: all(victim.id in n.service.transport.inbound.streams_from() for n in rest),
                           what="the victim's raft streams open")
    await rest[-1].service.remove_node(victim.id, user="root")
    await cluster.wait_for(lambda: all(victim.id in n.service.state.removed for n in rest), what="the tombstone")
    terms = {n.id: n.driver.status().term for n in rest}
    victim.service.transport.send([Heartbeat(frm=victim.id, to=n.id, term=terms[n.id] + 50) for n in rest])
    await cluster.wait_for(lambda: all(victim.id not in n.service.transport.inbound.streams_from() for n in rest),
                           what="the removed box's open raft streams cut at its next frame")
    assert {n.id: n.driver.status().term for n in rest} == terms      # the frame reached no core
    for n in rest:
        assert await open_stream(victim.identity, n) == 403
    for n in rest:
        status, answer = await post(victim.identity, n, PROPOSE_PATH, {
            "from": victim.id, "cmd": {"op": "node.health", "id": victim.id, "status": "up", "ts": 1.0}})
        assert status == 403 and answer["error"]["code"] == "not_a_member"
    assert victim.id not in lead.driver.status().voters


async def test_a_member_speaking_for_another_box_or_user_is_refused_on_every_box(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    await lead.service.grant_admin("root")
    await cluster.sign_in("root")
    a, b = [n for n in nodes if n is not lead]
    await lead.service.change_account({"op": "person.add", "name": "alice", "role": "user", "user": "root",
                                       "boxes": [a.id]})
    await cluster.wait_for(lambda: "alice" in a.service.state.people, what="alice's account on her box")
    job = await a.service.submit_job(SPEC, "alices", user="alice")
    gpus_before = {n.id: dict(n.service.state.nodes[lead.id]["resources"]) for n in nodes}
    forged = {"op": "node.upsert", "id": lead.id, "name": "forged", "address": "10.9.9.9", "cluster_port": 1,
              "resources": {"gpus": list(range(64))}, "ts": 1.0, "proposer": lead.id}   # its own claim is ignored
    status, answer = await post(b.identity, lead, PROPOSE_PATH, {"from": b.id, "cmd": forged, "timeout": 5})
    assert status == 403 and answer["error"]["message"] == f"{b.name} may not report {lead.name}'s resources"
    with pytest.raises(Forbidden, match=f"user mallory may not stop {job['id']}, which is alice's"):
        await b.service.update_job(job["id"], stop_requested="mine", user="mallory")
    await lead.service.submit_job(SPEC, "marker")                 # applied after both refusals everywhere
    await cluster.wait_for(lambda: all(len(n.service.state.jobs) == 2 for n in nodes), what="the marker")
    for n in nodes:                                               # the same refusal on every box
        assert n.service.state.nodes[lead.id]["resources"] == gpus_before[n.id]
        assert n.service.state.nodes[lead.id]["name"] == lead.name
        assert n.service.state.jobs[job["id"]].stop_requested == ""
    await a.service.update_job(job["id"], stop_requested="by admin", user="root")
    await cluster.wait_for(lambda: all(n.service.state.jobs[job["id"]].stop_requested == "by admin"
                                       for n in nodes), what="the admin's stop")
