"""Membership is the trust boundary (issue 13), with real daemons on netns hosts.

Three boxes form a cluster with the operator's CLI (``floydd init`` on box 1, so its user is
the cluster's admin). A fourth host redeems a token (``floydd join``) but never starts a
daemon: holding a certificate of the cluster, it cannot change leadership (a high-term
heartbeat and vote), append, propose or read on any box. A member (box 2) that reports box
1's resources or asks to stop the admin's job for a user it does not speak for is refused.
Once the admin is signed out of box 2 (issue 20: a box acts only for people signed in on it),
box 2's forged proposals in the admin's name (stopping the admin's job, making bob an admin,
an API token for the admin with a secret box 2 chose, a join token "made by" the admin) are
refused on every box, and every box's own state shows nothing changed. A removed member
(box 3, ``floydd remove``) is refused everywhere; so is the fourth host once its redeemed
join is cancelled, and it never becomes a member.
"""

from __future__ import annotations

import json
import time

import pytest

from floydd.cluster.state.apitokens import new_api_token
from floydd.security.identity import NodeIdentity
from floydd.security.tokens import new_token
from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import attempt, form, init_or_join, submit

pytestmark = pytest.mark.slow


def _probe(host, tls, *args) -> list[dict]:
    res = host.python("-m", "tests.system._rogue_probe", str(tls), *args, check=True, timeout=60)
    return json.loads(res.stdout)


def test_a_certificate_is_not_the_cluster(netns, tmp_path):
    net = netns(4)
    boxes = form(net, tmp_path, ["1", "0", "0"], {})
    client = boxes[0][3]
    view = client.cluster()
    members = {m["name"]: m for m in view["members"]}
    ids = {name: m["id"] for name, m in members.items()}
    targets = [f"{m['id']}@{m['address']}" for m in view["members"]]
    leader = next(m for m in view["members"] if m["leader"])
    before = {name: (m["role"], m["leader"]) for name, m in members.items()}
    term = view["term"]

    # a token redeemed, the daemon never started: a certificate, not a member
    rogue, rogue_state = init_or_join(net, tmp_path, 4)
    tls = rogue_state / "tls"
    for answer in (_probe(rogue, tls, "raft", str(term + 1000), *targets), _probe(rogue, tls, "read", *targets),
                   _probe(rogue, tls, "propose", json.dumps({"op": "job.submit", "idem_key": "evil", "project": "p",
                                                             "spec": {"command": "id"}, "user": "root"}), *targets)):
        assert [(a["status"], a["code"]) for a in answer] == [(403, "not_a_member")] * 3, answer
    for _host, _state, _daemon, c in boxes:         # nobody followed the impostor
        now = c.cluster()
        assert now["term"] == term and {m["name"]: (m["role"], m["leader"]) for m in now["members"]} == before

    # a member speaking for another box, or for a user on the admin's job
    project = tmp_path / "project"
    project.mkdir()
    (project / "run.sh").write_text("sleep 60\n")
    key = submit(client, project, "sleep 60")
    wait_until(lambda: (attempt(client.job, key) or {}).get("state") == "running", timeout=30, what="the job runs")
    box2_tls = boxes[1][1] / "tls"
    lead = f"{leader['id']}@{leader['address']}"
    forged = {"op": "node.upsert", "id": ids["box1"], "name": "box1", "address": "10.9.9.9", "cluster_port": 1,
              "resources": {"gpus": list(range(64))}, "proposer": ids["box1"]}
    [answer] = _probe(boxes[1][0], box2_tls, "propose", json.dumps(forged), lead)
    assert answer["status"] == 403 and answer["message"] == "box2 may not report box1's resources", answer
    [answer] = _probe(boxes[1][0], box2_tls, "propose",
                      json.dumps({"op": "job.update", "job": key, "stop_requested": "mine", "user": "mallory"}), lead)
    assert answer["status"] == 403 and "user mallory may not stop" in answer["message"], answer
    # a member speaking for people not signed in on it (issue 20): root made box2's join token, so
    # box2 acted for root; signed out of box2, root's name is refused there on every box
    boxes[0][0].floydd(boxes[0][1], "user", "unmap", "root", "box2")
    boxes[0][0].floydd(boxes[0][1], "user", "add", "bob", "--box", "box1")
    chosen = new_api_token()                        # an API token for the admin, with a secret box2 chose
    join = new_token(view["ca_fingerprint"], 600, time.time())
    forged = [{"op": "job.update", "job": key, "stop_requested": "mine", "user": "root"},
              {"op": "person.role", "name": "bob", "role": "admin", "user": "root"},
              {"op": "apitoken.create", "id": chosen.token_id, "person": "root", "secret_sha256": chosen.secret_sha256,
               "public_key": chosen.public_key, "user": "root"},
              {"op": "token.create", "id": join.token_id, "secret_sha256": join.secret_sha256,
               "expires": join.expires_at, "made_by": "root", "made_on": ids["box2"]}]
    for cmd in forged:                              # to the leader: what it commits, every box applies
        [refusal] = _probe(boxes[1][0], box2_tls, "propose", json.dumps(cmd), lead)
        assert (refusal["status"], refusal["code"]) == (403, "not_signed_in"), (cmd["op"], refusal)
        assert refusal["message"] == f"box2 may not act for root ({cmd['op']}): root is not signed in on box2"
    mapped = boxes[0][0].floydd(boxes[0][1], "user", "map", "root", "box2").stdout
    assert "on box2, the login name root acts as root" in mapped

    marker = submit(client, project, "true")       # committed after every refusal: applied after them
    for _host, _state, _daemon, c in boxes:         # each box's own state
        wait_until(lambda: any(j["id"] == marker for j in attempt(lambda: c.jobs("outage", stale=True)) or ()),
                   timeout=30, what="the marker job on every box")
        nodes = {n["name"]: n for n in c.nodes(stale=True)}
        assert nodes["box1"]["address"] == members["box1"]["address"].rsplit(":", 1)[0], nodes["box1"]
        job = next(j for j in c.jobs("outage", stale=True) if j["id"] == key)
        assert job["state"] == "running" and not job.get("stop_requested"), job
        assert {p["name"]: p["role"] for p in c.people(stale=True)} == {"root": "admin", "bob": "user"}
        assert chosen.token_id not in {t["id"] for t in c.api_tokens(stale=True)}
        assert join.token_id not in {t["id"] for t in c.tokens()}

    # a removed member is refused by every box
    boxes[0][0].floydd(boxes[0][1], "remove", ids["box3"], "--yes")
    others = [t for t in targets if not t.startswith(ids["box3"])]
    answers = _probe(boxes[2][0], boxes[2][1] / "tls", "propose",
                     json.dumps({"op": "node.health", "id": ids["box3"], "status": "up"}), *others)
    assert [(a["status"], a["code"]) for a in answers] == [(403, "not_a_member")] * 2, answers
    answers = _probe(boxes[2][0], boxes[2][1] / "tls", "read", *others)
    assert [a["status"] for a in answers] == [403, 403]

    # the fourth host's redeemed join, cancelled before its daemon ever started: never a member
    rogue_id = NodeIdentity.load(tls).node_id
    said = boxes[0][0].floydd(boxes[0][1], "remove", rogue_id, "--yes").stdout
    assert f"the join of node {rogue_id} is cancelled" in said, said
    upsert = {"op": "node.upsert", "id": rogue_id, "name": "box4", "address": rogue.ip, "cluster_port": 7654,
              "rejoin": True}
    answers = _probe(rogue, tls, "propose", json.dumps(upsert), *others)
    assert [(a["status"], a["code"]) for a in answers] == [(403, "not_a_member")] * 2, answers
    logs = [(b[2].log_path, b[2].log_path.stat().st_size) for b in boxes[:2]]
    late = rogue.start_floydd(rogue_state, "--node-name", "box4", "--dev-fake-gpus", "0")
    try:
        refused = f"from node {rogue_id} (certificate"

        def tried() -> bool:                        # said by a member since the late box started
            return any(f"{refused}" in line and line.endswith(": not a member")
                       for path, start in logs for line in path.read_bytes()[start:].decode(errors="replace")
                       .splitlines())
        wait_until(tried, timeout=60, what="the late box to try and be refused")
        assert rogue_id not in {m["id"] for m in client.cluster()["members"]}
        assert rogue_id not in {n["id"] for n in client.nodes()}
    finally:
        late.stop()
