"""Zeroconf discovery on loopback: real mDNS between Discovery instances in one process.

Every test uses its own random cluster fingerprints and node ids, so a concurrent run (or
anything else speaking mDNS on loopback) cannot be mistaken for a peer.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable

import pytest

from floydd.cluster.net.discovery import PROTOCOL_VERSION, Discovery, Peer
from floydd.errors import Conflict
from tests.conftest import wait_until_async

FAST = {"interfaces": ["127.0.0.1"], "query_interval": 0.25, "expire_after": 30.0}


async def eventually(cond: Callable[[], object], timeout: float, what: str) -> float:
    """Poll ``cond`` until truthy; return the seconds it took, fail after ``timeout``."""
    start = time.monotonic()
    await wait_until_async(cond, timeout, what=what)
    return time.monotonic() - start


def _node(fingerprint: str, label: str, port: int, **kw) -> Discovery:
    kw.setdefault("node_id", f"{label}-{secrets.token_hex(3)}")
    return Discovery(fingerprint=fingerprint, port=port, **{**FAST, **kw})


def _silence(d: Discovery):
    """``d`` stops asking, announcing and answering, without a goodbye (as if unplugged)."""
    for task in list(d._tasks):
        task.cancel()
    registry = d._azc.zeroconf.registry
    info = registry.async_get_info_name(d._info.name)
    registry.async_remove(info)
    return info


@pytest.fixture
async def nodes():
    """Build Discovery instances with ``make(...)``; all are closed after the test."""
    made: list[Discovery] = []

    def make(*args, **kw) -> Discovery:
        made.append(_node(*args, **kw))
        return made[-1]

    yield make
    await asyncio.gather(*(d.close() for d in made))


async def test_two_nodes_find_each_other_and_ignore_another_cluster(nodes):
    ours, theirs = secrets.token_hex(8), secrets.token_hex(8)
    a = nodes(ours, "a", 7001, api_port=8001, name="box-a")
    b = nodes(ours, "b", 7002)
    c = nodes(theirs, "c", 7003)
    await asyncio.gather(a.start(), b.start(), c.start())

    await eventually(lambda: a.node_id in b.peers and b.node_id in a.peers, 10, "a and b to find each other")
    # c answers the same questions on the same wire; give it a chance to be (wrongly) listed.
    await eventually(lambda: c._foreign and len(a._foreign) >= 1 and len(b._foreign) >= 1, 10,
                     "a and b to have resolved and rejected c")
    assert list(a.peers) == [b.node_id]
    assert list(b.peers) == [a.node_id]
    assert c.peers == {}
    seen_by_b = b.peers[a.node_id]
    assert (seen_by_b.addresses, seen_by_b.port, seen_by_b.api_port, seen_by_b.name, seen_by_b.protocol,
            seen_by_b.source) == (("127.0.0.1",), 7001, 8001, "box-a", PROTOCOL_VERSION, "mdns")
    assert a.peers[b.node_id].api_port == 7002  # defaults to the node-to-node port


async def test_close_says_goodbye_and_the_peer_drops_it_at_once(nodes):
    fp = secrets.token_hex(8)
    a = nodes(fp, "a", 7001)
    b = nodes(fp, "b", 7002)
    await asyncio.gather(a.start(), b.start())
    await eventually(lambda: b.node_id in a.peers, 10, "a to find b")

    await b.close()
    # expire_after is 30 s: only the goodbye can make this quick.
    took = await eventually(lambda: b.node_id not in a.peers, 3, "a to drop b after its goodbye")
    assert took < 3


async def test_on_change_reports_arrival_and_departure_but_not_refreshes(nodes):
    fp = secrets.token_hex(8)
    views: list[tuple[Peer, ...]] = []
    a = nodes(fp, "a", 7001, on_change=views.append)
    b = nodes(fp, "b", 7002)
    await a.start()
    await b.start()
    await eventually(lambda: views and views[-1] and views[-1][0].node_id == b.node_id, 10, "b reported to a")
    # Many refresh answers arrive (0.25 s questions); none of them is a change.
    refreshed = a.peers[b.node_id].last_seen
    await eventually(lambda: a.peers[b.node_id].last_seen > refreshed + 0.5, 10, "b's records refreshed")
    assert [[p.node_id for p in v] for v in views] == [[b.node_id]]
    await b.close()
    await eventually(lambda: len(views) == 2, 3, "the departure reported")
    assert views[-1] == ()


async def test_a_peer_that_falls_silent_expires_and_returns_when_heard_again(nodes):
    fp = secrets.token_hex(8)
    a = nodes(fp, "a", 7001, expire_after=2.0)
    b = nodes(fp, "b", 7002)
    await asyncio.gather(a.start(), b.start())
    await eventually(lambda: b.node_id in a.peers, 10, "a to find b")

    info = _silence(b)
    await eventually(lambda: b.node_id not in a.peers, 5, "a to expire the silent b")
    b._azc.zeroconf.registry.async_add(info)  # it answers again
    await eventually(lambda: b.node_id in a.peers, 5, "a to list b again once it answers")


async def test_a_node_back_with_another_port_is_updated_in_place(nodes):
    fp = secrets.token_hex(8)
    views: list[tuple[Peer, ...]] = []
    a = nodes(fp, "a", 7001, on_change=views.append)
    b = nodes(fp, "b", 7002, api_port=8000)
    await asyncio.gather(a.start(), b.start())
    await eventually(lambda: b.node_id in a.peers, 10, "a to find b")

    # b dies without a goodbye and comes straight back (same node id) with new ports.
    _silence(b)
    b2 = nodes(fp, "b", 7102, api_port=8100, node_id=b.node_id)
    await b2.start()
    await eventually(lambda: a.peers[b.node_id].port == 7102, 5, "a to see b's new port")
    assert a.peers[b.node_id].api_port == 8100
    assert all(b.node_id in [p.node_id for p in v] for v in views), "b was never dropped in between"


async def test_close_leaves_no_task_or_thread_behind(nodes):
    threads = set(threading.enumerate())
    fp = secrets.token_hex(8)
    a = nodes(fp, "a", 7001)
    b = nodes(fp, "b", 7002)
    await asyncio.gather(a.start(), b.start())
    await eventually(lambda: b.node_id in a.peers, 10, "a to find b")
    await asyncio.gather(a.close(), b.close())
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == []
    assert a._tasks == set() and b._tasks == set()
    assert set(threading.enumerate()) <= threads


async def test_a_second_node_with_the_same_id_is_refused(nodes):
    fp = secrets.token_hex(8)
    a = nodes(fp, "a", 7001)
    await a.start()
    twin = nodes(fp, "a", 7002, node_id=a.node_id)
    with pytest.raises(Conflict, match=a.node_id) as err:
        await twin.start()
    assert "state dir" in err.value.hint
    assert twin._tasks == set()


def test_seeds_are_listed_unresolved_until_the_cluster_layer_names_them():
    views = []
    d = Discovery(fingerprint="fp", node_id="me", port=7654, seeds=["10.0.0.5:7654", "10.0.0.6"],
                  on_change=views.append)
    assert d.peers == {}
    assert d.snapshot() == (Peer(node_id=None, addresses=("10.0.0.5",), port=7654, source="seed"),
                            Peer(node_id=None, addresses=("10.0.0.6",), port=7654, source="seed"))
    d.resolve_seed("10.0.0.6:7654", "n6")
    assert d.peers == {"n6": Peer(node_id="n6", addresses=("10.0.0.6",), port=7654, source="seed")}
    assert [p.node_id for p in d.snapshot()] == ["n6", None]
    assert [[p.node_id for p in v] for v in views] == [["n6", None]]
    with pytest.raises(KeyError):
        d.resolve_seed("10.0.0.7:7654", "n7")


def test_a_seed_that_turns_out_to_be_this_node_is_not_a_peer():
    d = Discovery(fingerprint="fp", node_id="me", port=7654, seeds=["10.0.0.5"])
    d.resolve_seed("10.0.0.5:7654", "me")
    assert d.peers == {} and d.snapshot() == ()


@pytest.mark.parametrize("kw", [{"node_id": "a.b"}, {"node_id": ""}, {"node_id": "x" * 64},
                                {"fingerprint": ""}, {"port": 0}, {"query_interval": 0}])
def test_bad_arguments_are_refused(kw):
    with pytest.raises(ValueError):
        Discovery(**{"fingerprint": "fp", "node_id": "n", "port": 7654, **kw})
