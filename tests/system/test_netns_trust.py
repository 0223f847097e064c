"""Trust between boxes with real daemons in four namespace hosts: tokens listed and revoked
on any voter, a box joining through another voter once the first box is switched off, and
node certificates of 30 seconds renewing themselves while the cluster keeps working."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import attempt, crash, form

pytestmark = pytest.mark.slow

VALIDITY = 30
"""Seconds. With 15 s certificates (a renewal every 10 s) a box that joined under load could
meet its leader two renewals ahead of the snapshot it was sent, refuse its raft messages (the
serial is neither the recorded nor the previous one) and never catch up: a known corner, see
issue 21's closing note."""


def _members(host, state) -> dict:
    res = host.floydd(state, "members", "--json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else {"members": []}


def _tokens(host, state) -> list[dict]:
    res = host.floydd(state, "token", "list", "--json", check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_tokens_joins_without_the_first_box_and_certificates_that_renew(netns, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOYDD_CERT_VALIDITY", str(VALIDITY))      # floydd init, joins and every daemon
    net = netns(4)
    boxes = form(net, tmp_path, ["0", "0", "0"], {})
    (h1, s1, d1, _c1), (h2, s2, _d2, c2), (h3, s3, _d3, _c3) = boxes
    first_expiry = {m["id"]: m["cert_expires"] for m in _members(h2, s2)["members"]}
    wait_until(lambda: all((s / "ca" / "ca.key").exists() for s in (s2, s3)), timeout=30,
               what="the CA key on the other voters")
    assert ((s2 / "ca" / "ca.key").stat().st_mode & 0o777) == 0o600

    # a token made on box 2, listed and revoked on box 3, is refused
    revoked = h2.floydd(s2, "token", "create", "--ttl", "10m").stdout.strip()
    [record] = [t for t in _tokens(h3, s3) if revoked.split(".")[2] == t["id"]]
    assert record["state"] == "valid" and record["made_on"] == _members(h2, s2)["node_id"]
    h3.floydd(s3, "token", "revoke", record["id"])
    assert next(t for t in _tokens(h2, s2) if t["id"] == record["id"])["state"] == "revoked"
    unknown = h3.floydd(s3, "token", "revoke", "0123456789abcdef", check=False)
    assert unknown.returncode != 0 and "no join token" in unknown.stderr and "Traceback" not in unknown.stderr
    h4, s4 = net.host(4), tmp_path / "s4"
    addr4 = f"{h4.ip}:7654"
    refused = h4.floydd(s4, "join", revoked, "--listen", addr4, "--advertise", addr4, check=False)
    assert refused.returncode != 0 and "revoked" in refused.stderr, refused.stderr

    # the first box is switched off: a token from box 2, the join through box 3
    crash(h1, d1)
    wait_until(lambda: attempt(c2.tokens) is not None, timeout=30, what="a leader among boxes 2 and 3")
    token = wait_until(lambda: h2.floydd(s2, "token", "create", "--ttl", "10m", check=False).stdout.strip(),
                       timeout=30, what="a token made on box 2")
    h4.floydd(s4, "join", token, f"{h3.ip}:7654", "--listen", addr4, "--advertise", addr4)
    h4.start_floydd(s4, "--node-name", "box4")
    id4 = wait_until(lambda: _members(h4, s4).get("node_id"), timeout=30, what="box 4's daemon")
    wait_until(lambda: id4 in {m["id"] for m in _members(h2, s2)["members"]}, timeout=30, what="box 4 listed")
    used = next(t for t in _tokens(h3, s3) if t["id"] == token.split(".")[2])
    assert used["state"] == "used" and used["used_by"] == id4
    # box 4's first state is the cluster's oldest snapshot, which names box 1 alone: it still
    # takes the leader it has not heard of yet, and catches up
    others = {_members(h, s)["node_id"] for h, s in ((h2, s2), (h3, s3))}
    wait_until(lambda: others <= {m["id"] for m in _members(h4, s4)["members"]}, timeout=30,
               what="box 4 up to date with boxes 2 and 3")
    assert any(t["id"] == used["id"] for t in _tokens(h4, s4))

    # certificates of 30 s: each live member renews its own, the new expiry is listed, and the
    # cluster works once every first certificate has expired
    live = [_members(h, s)["node_id"] for h, s in ((h2, s2), (h3, s3))]

    def renewed():
        view = {m["id"]: m["cert_expires"] for m in _members(h2, s2)["members"]}
        return all(view.get(n) and view[n] > first_expiry[n] for n in live) and view
    wait_until(renewed, timeout=60, what="boxes 2 and 3 renewing their certificates")
    wait_until(lambda: time.time() > max(first_expiry[n] for n in live) + 1, timeout=VALIDITY + 5,
               what="the first certificates to expire")
    h3.floydd(s3, "token", "create", "--ttl", "10m")     # raft between boxes 2 and 3 on renewed certificates
    assert {t["state"] for t in _tokens(h2, s2)} == {"revoked", "used", "valid"}
    expiry = {m["id"]: m["cert_expires"] for m in _members(h3, s3)["members"]}
    assert all(expiry[n] > time.time() for n in live)
