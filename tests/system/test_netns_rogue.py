"""Membership is the trust boundary (issue 13), with real daemons on netns hosts.

Three boxes form a cluster with the operator's CLI (``floydd init`` on box 1, so its user is
the cluster's admin). A fourth host redeems a token (``floydd join``) but never starts a
daemon: holding a certificate of the cluster, it cannot change leadership (a high-term
heartbeat and vote), append, propose or read on any box. A member (box 2) that reports box
1's resources or asks to stop the admin's job for a user it does not speak for is refused,
and every box's own state shows nothing changed. A removed member (box 3, ``floydd remove``)
is refused everywhere.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import wait_until
from tests.netns.fixture import netns  # noqa: F401  (the fixture, registered for this module)
from tests.system.netns_boxes import attempt, form, init_or_join, submit

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
    marker = submit(client, project, "true")       # committed after both refusals: applied after them
    for _host, _state, _daemon, c in boxes:         # each box's own state
        wait_until(lambda: any(j["id"] == marker for j in attempt(lambda: c.jobs("outage", stale=True)) or ()),
                   timeout=30, what="the marker job on every box")
        nodes = {n["name"]: n for n in c.nodes(stale=True)}
        assert nodes["box1"]["address"] == members["box1"]["address"].rsplit(":", 1)[0], nodes["box1"]
        job = next(j for j in c.jobs("outage", stale=True) if j["id"] == key)
        assert job["state"] == "running" and not job.get("stop_requested"), job

    # a removed member is refused by every box
    boxes[0][0].python("-m", "floydd.cli.floydd", "remove", ids["box3"], "--yes", "--state-dir", str(boxes[0][1]),
                       check=True)
    others = [t for t in targets if not t.startswith(ids["box3"])]
    answers = _probe(boxes[2][0], boxes[2][1] / "tls", "propose",
                     json.dumps({"op": "node.health", "id": ids["box3"], "status": "up"}), *others)
    assert [(a["status"], a["code"]) for a in answers] == [(403, "not_a_member")] * 2, answers
    answers = _probe(boxes[2][0], boxes[2][1] / "tls", "read", *others)
    assert [a["status"] for a in answers] == [403, 403]
