"""A box acts only for the people signed in on it (floydd.cluster.state.signin), between in-process
boxes with real mTLS and real raft: a member box that forges proposals in other people's
names with its own valid certificate is refused on every box, and nothing changes; a
personal token presented to a box lets that box act for its person, and only that box.
"""

from __future__ import annotations

import pytest

from floydd.cluster.state.apitokens import new_api_token, parse_api_token
from floydd.cluster.net.presented import PresentedToken, presenting, signed
from floydd.cluster.net.transport import PROPOSE_PATH
from floydd.errors import Forbidden
from floydd.security.tokens import new_token
from tests.integration.cluster.test_cluster_trust_boundary import SPEC, outsider, post, redeemed


async def lab(cluster):
    """Three boxes; root ran floydd init on the leader; alice uses box a, bob box b."""
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    a, b = [n for n in nodes if n is not lead]
    await lead.service.grant_admin("root")
    for name, box in (("alice", a), ("bob", b)):
        await lead.service.change_account({"op": "person.add", "name": name, "role": "user", "user": "root",
                                           "boxes": [box.id]})
    await cluster.wait_for(lambda: all(len(n.service.state.people) == 3 for n in nodes), what="the people")
    return nodes, lead, a, b


async def test_a_member_forging_proposals_in_people_s_names_is_refused_on_every_box(cluster):
    nodes, lead, a, b = await lab(cluster)
    job = await a.service.submit_job(SPEC, "alices", user="alice")
    chosen = new_api_token()                       # a secret the rogue box chose
    join = new_token(cluster.ca.fingerprint, 600, 1.0)
    forged = [
        {"op": "job.update", "job": job["id"], "stop_requested": "mine", "user": "alice"},
        {"op": "person.role", "name": "bob", "role": "admin", "user": "root"},
        {"op": "apitoken.create", "id": chosen.token_id, "person": "root", "secret_sha256": chosen.secret_sha256,
         "public_key": chosen.public_key, "user": "root"},
        {"op": "token.create", "id": join.token_id, "secret_sha256": join.secret_sha256,
         "expires": join.expires_at, "made_by": "root", "made_on": b.id},
        {"op": "node.remove", "id": a.id, "user": "root"},
    ]
    for cmd in forged:
        status, answer = await post(b.identity, lead, PROPOSE_PATH,
                                    {"from": b.id, "cmd": {**cmd, "ts": 2.0, "v": 3}, "timeout": 5})
        who = cmd.get("user") or cmd.get("made_by")
        assert status == 403 and answer["error"]["code"] == "not_signed_in", (cmd["op"], answer)
        assert answer["error"]["message"] == f"{b.name} may not act for {who} ({cmd['op']}): {who} is not signed " \
                                             f"in on {b.name}"
    await lead.service.submit_job(SPEC, "marker")                 # applied after every refusal, everywhere
    await cluster.wait_for(lambda: all(len(n.service.state.jobs) == 2 for n in nodes), what="the marker")
    for n in nodes:                                               # each box's own state: nothing changed
        state = n.service.state
        assert state.jobs[job["id"]].stop_requested == ""
        assert state.admins == ["root"] and state.apitokens.tokens == {} and state.trust.tokens == {}
        assert a.id in state.nodes and a.id not in state.removed


async def test_a_token_presented_to_a_box_lets_that_box_act_for_its_person_and_no_other(cluster):
    nodes, lead, a, b = await lab(cluster)
    job = await a.service.submit_job(SPEC, "alices", user="alice")
    new = new_api_token()
    await a.service.change_account({"op": "apitoken.create", "id": new.token_id, "person": "alice",
                                    "secret_sha256": new.secret_sha256, "public_key": new.public_key,
                                    "user": "alice"})
    await cluster.wait_for(lambda: all(new.token_id in n.service.state.apitokens.tokens for n in nodes),
                           what="alice's token everywhere")
    token_id, secret = parse_api_token(new.text)
    with pytest.raises(Forbidden, match=f"alice is not signed in on {b.name}"):
        await b.service.update_job(job["id"], stop_requested="from b", user="alice")
    with presenting(PresentedToken(token_id=token_id, person="alice", secret=secret)):
        await b.service.update_job(job["id"], stop_requested="from her laptop through b", user="alice")
        replay = signed(b.service.state, {"op": "job.update", "job": job["id"], "stop_requested": "replayed",
                                          "user": "alice", "ts": 3.0, "v": 3}, b.id)
    await cluster.wait_for(lambda: all(n.service.state.jobs[job["id"]].stop_requested ==
                                       "from her laptop through b" for n in nodes), what="her stop everywhere")
    c = lead                                                      # the signature made for b, sent by another box
    status, answer = await post(c.identity, lead, PROPOSE_PATH, {"from": c.id, "cmd": replay, "timeout": 5})
    assert status == 403 and "does not match this command from this box" in answer["error"]["message"]
    await a.service.change_account({"op": "apitoken.revoke", "id": token_id, "user": "alice"})
    await cluster.wait_for(lambda: b.service.state.apitokens.tokens[token_id]["revoked"] is not None,
                           what="the revocation on b")
    with presenting(PresentedToken(token_id=token_id, person="alice", secret=secret)):
        with pytest.raises(Forbidden, match=f"alice's personal token {token_id} was revoked"):
            await b.service.update_job(job["id"], stop_requested="after the revoke", user="alice")


async def test_a_redeemed_join_is_cancelled_and_its_box_never_becomes_a_member(cluster):
    nodes, lead, a, b = await lab(cluster)
    await cluster.sign_in("root")
    for how in ("remove", "revoke"):
        box = outsider(cluster, f"late-{how}")
        token = await redeemed(cluster, lead, box, made_by="root")
        if how == "remove":                                       # floydd remove ID, before its daemon started
            await a.service.remove_node(box.node_id, user="root")
        else:                                                     # floydd token revoke of the used token
            answer = await a.service._propose({"op": "token.revoke", "id": token, "by": "root"})
            assert answer["cancelled_join"] == box.node_id
        await cluster.wait_for(lambda: all(box.serial in n.service.state.revoked for n in nodes),
                               what="its certificate revoked everywhere")
        upsert = {"op": "node.upsert", "id": box.node_id, "name": "late", "address": "127.0.0.1", "cluster_port": 1,
                  "rejoin": True, "ts": 5.0, "v": 3}
        for n in nodes:                                           # it starts later: refused by every box
            status, answer = await post(box, n, PROPOSE_PATH, {"from": box.node_id, "cmd": upsert, "timeout": 5})
            assert status == 403 and answer["error"]["code"] == "not_a_member", answer
            assert box.node_id not in n.service.state.nodes and box.node_id in n.service.state.removed
