"""Zeroconf discovery between real processes on three hosts of a namespace LAN (real mDNS)."""

from __future__ import annotations

import secrets
import time

import pytest

from tests.netns.discovery_node import DiscoveryNode
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)

pytestmark = pytest.mark.slow

QUERY, EXPIRE = 0.5, 2.0
GONE_WITHIN = EXPIRE + QUERY + 1.5   # expiry is checked once per interval; 1.5 s of slack


@pytest.fixture
def cluster(netns, tmp_path):
    """Three hosts, one discovery node each (ids h1..h3), all listing each other."""
    net = netns(3)
    fp = secrets.token_hex(16)
    nodes = [DiscoveryNode(h, f"h{h.index}", fp, log_dir=tmp_path, query_interval=QUERY, expire_after=EXPIRE)
             for h in net.hosts]
    for node in nodes:
        node.start()
    for node in nodes:
        node.wait(lambda peers, me=node.node_id: peers == {"h1", "h2", "h3"} - {me}, 15, "the other two")
    return net, nodes


def test_three_hosts_find_each_other_within_2s_and_ignore_another_cluster(netns, tmp_path):
    net = netns(3)
    fp = secrets.token_hex(16)
    nodes = [DiscoveryNode(h, f"h{h.index}", fp, log_dir=tmp_path, query_interval=QUERY, expire_after=EXPIRE)
             for h in net.hosts]
    stranger = DiscoveryNode(net.host(3), "x3", secrets.token_hex(16), log_dir=tmp_path, query_interval=QUERY)
    for node in [stranger, *nodes]:
        node.start()
    stranger.wait_event("started", 15)
    starting = [node.wait_event("starting", 15)["t"] for node in nodes]
    for node in nodes:
        listed = node.wait(lambda peers, me=node.node_id: peers == {"h1", "h2", "h3"} - {me}, 15, "the other two")
        # Counted from the last node starting discovery (Python's own start-up is not discovery).
        assert listed - max(starting) < 2.0, f"{node} took {listed - max(starting):.2f}s"
    # The stranger shares host 3 and the wire: let a few question rounds pass (a negative
    # check needs time), then it must still be unlisted.
    time.sleep(3 * QUERY)
    assert all(node.peers() == {"h1", "h2", "h3"} - {node.node_id} for node in nodes)
    assert stranger.peers() == set()
    latest = [e for e in nodes[0].events if e["event"] == "peers"][-1]["peers"]
    assert {p["node_id"]: (p["addresses"], p["port"]) for p in latest} == {
        "h2": ([net.host(2).ip], 7654), "h3": ([net.host(3).ip], 7654)}


def test_a_cut_host_disappears_and_comes_back_after_heal(cluster):
    net, (h1, h2, h3) = cluster
    cut_at = time.monotonic()
    net.cut(3)
    for node in (h1, h2):
        gone = node.wait(lambda peers: "h3" not in peers, 10, "h3 dropped", after=cut_at)
        assert gone - cut_at < GONE_WITHIN
        assert node.peers() == {"h1", "h2"} - {node.node_id}, "the cut must not drop anyone else"
    h3.wait(lambda peers: not peers, 10, "h3 alone", after=cut_at)

    healed_at = time.monotonic()
    net.heal(3)
    for node in (h1, h2, h3):
        back = node.wait(lambda peers, me=node.node_id: peers == {"h1", "h2", "h3"} - {me}, 10, "all back",
                         after=healed_at)
        assert back - healed_at < QUERY + 1.5


def test_a_clean_stop_is_noticed_at_once_and_a_kill_by_expiry(cluster):
    net, (h1, h2, h3) = cluster
    stopped_at = time.monotonic()
    assert h2.stop() == 0
    gone = h1.wait(lambda peers: "h2" not in peers, 5, "h2 dropped", after=stopped_at)
    assert gone - stopped_at < 1.0, "a goodbye should be noticed well before expiry"

    killed_at = time.monotonic()
    h3.kill9()
    gone = h1.wait(lambda peers: "h3" not in peers, 10, "h3 dropped", after=killed_at)
    # No goodbye: only expiry drops it. A peer's records come at most once a second, so its
    # last sighting may be up to ~1 s plus a question interval before the kill.
    assert EXPIRE - 1.0 - QUERY <= gone - killed_at < GONE_WITHIN


def test_a_fresh_node_is_listed_by_every_peer_within_3s_of_its_start(cluster, tmp_path):
    net, nodes = cluster
    nodes[2].stop()
    fresh = DiscoveryNode(net.host(3), "h3b", nodes[0].fingerprint, log_dir=tmp_path, query_interval=QUERY,
                          expire_after=EXPIRE).start()
    for node in nodes[:2]:
        listed = node.wait(lambda peers: "h3b" in peers, 10, "the fresh node")
        assert listed - fresh.t_spawn < 3.0, f"{node} listed it {listed - fresh.t_spawn:.2f}s after spawn"
    fresh.wait(lambda peers: peers == {"h1", "h2"}, 10, "its peers")
