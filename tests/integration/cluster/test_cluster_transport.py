"""The transport alone, between two mTLS listeners on loopback, with recording receivers."""

from __future__ import annotations

import contextlib
import socket

import aiohttp
import msgpack
import pytest
from aiohttp import web

from floydd.cluster.raft import ConfState, Heartbeat, InstallSnapshot, Snapshot, encode_message
from floydd.cluster.net.transport import RAFT_PATH, Transport
from floydd.cluster.state import versions
from floydd.errors import Conflict, Unavailable
from floydd.security.identity import NodeIdentity, init_cluster
from floydd.security.tls import client_context, require_peer_cert, server_context
from tests.conftest import wait_until_async


class Recorder:
    """A receiver that records what the transport hands it."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.unreachable: list[str] = []
        self.snapshots: list[tuple[str, bool]] = []
        self.proposals: list[tuple[dict, bool]] = []
        self.chunks: list[bytes] = []            # what this node streams beside a snapshot it sends
        self.received: list[tuple[int, list[bytes], bool]] = []   # (index, chunks, finished) received

    async def _source(self):
        for chunk in self.chunks:
            yield chunk

    def snapshot_source(self, message):
        return self._source()

    def snapshot_sink(self, message):
        entry = (message.snapshot.index, [], [False])
        self.received.append(entry)

        class Sink:
            async def add(self, chunk):
                entry[1].append(chunk)

            async def finish(self):
                entry[2][0] = True
        return Sink()

    def on_raft(self, peer, messages):
        self.batches.append(messages)

    async def on_propose(self, cmd, timeout, forwarded, *, peer=None, joining=False):
        self.proposals.append((cmd, forwarded))
        if cmd.get("op") == "boom":
            raise Conflict("refused", code="nope", hint="do not")
        return {"echo": cmd}

    async def on_read(self, query, args, timeout):
        return {"query": query, "args": args}

    def report_unreachable(self, peer):
        self.unreachable.append(peer)

    def report_snapshot(self, peer, ok):
        self.snapshots.append((peer, ok))


@pytest.fixture
def identities(tmp_path):
    ca, a = init_cluster(tmp_path / "ca", tmp_path / "a", "t", ["127.0.0.1"])
    out = [a]
    for name in ("b", "c"):
        me = NodeIdentity.load_or_create(tmp_path / name)
        me.install(ca.issue_node_cert(me.make_csr(), me.node_id, ["127.0.0.1"]), ca.cert_pem)
        out.append(me)
    return out


@contextlib.asynccontextmanager
async def endpoint(identity, *, stream: bool = True, standing=None):
    """A transport with a recorder, served on 127.0.0.1:0 behind the peer-certificate guard
    (``standing``: its rule, see require_peer_cert). ``stream=False``: without the raft
    stream's route, as a box of the release before it."""
    transport = Transport(identity, backoff=(0.01, 0.05), request_timeout=2.0)
    recorder = Recorder()
    transport.attach(recorder)
    app = web.Application(middlewares=[require_peer_cert(standing=standing)])
    app.add_routes([r for r in transport.routes() if stream or r.method != "GET"])
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(identity))
    await site.start()
    transport.advertise = f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        yield transport, recorder
    finally:
        await transport.close()
        await runner.cleanup()


async def until(cond, timeout=5.0):
    return await wait_until_async(cond, timeout, interval=0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_messages_arrive_in_order_coalesced_into_few_posts(identities):
    a, b, _ = identities
    async with endpoint(a) as (ta, _), endpoint(b) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        beats = [Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=i) for i in range(300)]
        ta.send(beats)
        await until(lambda: sum(len(x) for x in rb.batches) == 300)
        assert [m.commit for batch in rb.batches for m in batch] == list(range(300))
        await until(lambda: ta.sent_batches == len(rb.batches))     # counted once the 204 is back
        assert len(rb.batches) <= 3
        assert tb.address_of(a.node_id) == ta.advertise      # learnt from the sender's "addr"


async def test_an_unreachable_peer_is_reported_and_so_is_a_lost_snapshot(identities):
    a, b, _ = identities
    async with endpoint(a) as (ta, ra):
        ta.set_peer(b.node_id, f"127.0.0.1:{free_port()}")
        snap = Snapshot(index=5, term=1, conf=ConfState(voters=frozenset({a.node_id})), data=b"s")
        ta.send([InstallSnapshot(frm=a.node_id, to=b.node_id, term=1, snapshot=snap)])
        await until(lambda: ra.snapshots)
        assert ra.snapshots == [(b.node_id, False)] and b.node_id in ra.unreachable
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1)])
        await until(lambda: len(ra.unreachable) >= 2)


async def test_a_sent_snapshot_is_reported_delivered(identities):
    a, b, _ = identities
    async with endpoint(a) as (ta, ra), endpoint(b) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        snap = Snapshot(index=5, term=1, conf=ConfState(voters=frozenset({a.node_id})), data=b"x" * 100_000)
        ta.send([InstallSnapshot(frm=a.node_id, to=b.node_id, term=1, snapshot=snap)])
        await until(lambda: ra.snapshots)
        assert ra.snapshots == [(b.node_id, True)]
        assert rb.batches[0][0].snapshot == snap
        assert rb.received == [(5, [], [True])]


async def test_a_snapshot_streams_past_any_body_limit_and_arrives_only_whole(identities):
    """80 MiB of state and 40 chunks beside it (the raft POST's cap is 64 MiB): every byte
    arrives, the chunks before the message reaches raft; a stream cut short never reaches it."""
    a, b, _ = identities
    async with endpoint(a) as (ta, ra), endpoint(b) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        data = bytes(range(256)) * (80 * 4096)
        ra.chunks = [bytes([i]) * 300_000 for i in range(40)]
        snap = Snapshot(index=9, term=2, conf=ConfState(voters=frozenset({a.node_id})), data=data)
        ta.send([InstallSnapshot(frm=a.node_id, to=b.node_id, term=2, snapshot=snap)])
        await until(lambda: ra.snapshots, timeout=60)
        assert ra.snapshots == [(b.node_id, True)]
        assert rb.batches[0][0].snapshot.data == data
        assert rb.received == [(9, ra.chunks, [True])]

        async def broken():
            yield b"\x00" * 1000
            raise OSError("the disk went away")
        ra.snapshot_source = lambda message: broken()
        ta.send([InstallSnapshot(frm=a.node_id, to=b.node_id, term=2, snapshot=snap)])
        await until(lambda: len(ra.snapshots) == 2)
        assert ra.snapshots[1] == (b.node_id, False) and len(rb.batches) == 1


async def test_a_different_node_at_the_peers_address_is_not_talked_to(identities):
    a, b, c = identities
    async with endpoint(a) as (ta, ra), endpoint(c) as (tc, rc):
        ta.set_peer(b.node_id, tc.advertise)         # stale address book: c now listens there
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1)])
        await until(lambda: ra.unreachable)
        assert rc.batches == []
        with pytest.raises(Unavailable):
            await ta.forward_propose({"op": "x"}, 1.0, peer=b.node_id)
        assert rc.proposals == []


async def test_forwarded_proposals_and_reads_carry_results_and_errors(identities):
    a, b, _ = identities
    async with endpoint(a) as (ta, _), endpoint(b) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        result, by = await ta.forward_propose({"op": "hello", "n": 1}, 2.0, peer=b.node_id)
        assert (result, by) == ({"echo": {"op": "hello", "n": 1}}, b.node_id)
        _, by = await ta.forward_propose({"op": "seed"}, 2.0, address=tb.advertise, forwarded=False)
        assert by == b.node_id and rb.proposals[-1] == ({"op": "seed"}, False)
        with pytest.raises(Conflict) as exc:
            await ta.forward_propose({"op": "boom"}, 2.0, peer=b.node_id)
        assert (exc.value.code, exc.value.hint) == ("nope", "do not")
        result, _ = await ta.forward_read("jobs", {"project": "p"}, 2.0, peer=b.node_id)
        assert result == {"query": "jobs", "args": {"project": "p"}}


async def test_a_cut_link_loses_everything_both_ways(identities):
    a, b, _ = identities
    async with endpoint(a) as (ta, ra), endpoint(b) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        cut = {(a.node_id, b.node_id)}
        ta.drop = tb.drop = lambda frm, to: (frm, to) in cut
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1)])
        await until(lambda: ra.unreachable)
        with pytest.raises(Unavailable):
            await ta.forward_propose({"op": "x"}, 1.0, peer=b.node_id)
        assert rb.batches == [] and rb.proposals == []
        cut.clear()
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1)])
        await until(lambda: rb.batches)


async def test_raft_messages_go_through_one_stream_that_a_restarted_peer_gets_again(identities):
    a, b, _ = identities
    async with endpoint(a) as (ta, ra):
        async with endpoint(b) as (tb, rb):
            ta.set_peer(b.node_id, tb.advertise)
            for i in range(5):              # batches apart in time: each a frame of the same stream
                ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=i)])
                await until(lambda: len(rb.batches) == i + 1)
            assert ta.streams.opened == 1 and tb.inbound.streams_from() == {a.node_id: 1}
            assert [m.commit for batch in rb.batches for m in batch] == list(range(5))
        async with endpoint(b) as (tb2, rb2):      # b again, elsewhere: the old stream is gone
            ta.set_peer(b.node_id, tb2.advertise)
            ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=9)])
            await until(lambda: rb2.batches)
            assert ta.streams.opened == 2 and [m.commit for m in rb2.batches[0]] == [9]


async def test_a_peer_without_the_stream_is_sent_posts(identities):
    """A box of the release before the raft stream serves only ``POST /cluster/v1/raft``."""
    a, b, _ = identities
    async with endpoint(a) as (ta, ra), endpoint(b, stream=False) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=1)])
        await until(lambda: rb.batches)
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=2)])
        await until(lambda: len(rb.batches) == 2)
        assert [m.commit for batch in rb.batches for m in batch] == [1, 2] and ra.unreachable == []
        assert b.node_id in ta._post_only and tb.inbound.streams_from() == {}


async def test_a_stream_is_cut_at_the_next_frame_once_its_sender_may_not_speak(identities):
    """The peer-certificate rule is asked again before each frame: a node removed while its
    stream is open delivers nothing more."""
    a, b, _ = identities
    members = {a.node_id, b.node_id}
    async with endpoint(a) as (ta, ra), \
            endpoint(b, standing=lambda node, _serial: "member" if node in members else None) as (tb, rb):
        ta.set_peer(b.node_id, tb.advertise)
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=1)])
        await until(lambda: rb.batches)
        members.discard(a.node_id)
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=2)])
        await until(lambda: tb.inbound.streams_from() == {})
        ta.send([Heartbeat(frm=a.node_id, to=b.node_id, term=1, commit=3)])    # a new stream: refused
        await until(lambda: ra.unreachable)
        assert [m.commit for batch in rb.batches for m in batch] == [1]


async def test_a_frame_with_a_spoofed_or_misaddressed_message_closes_the_stream(identities):
    a, b, c = identities
    async with endpoint(b) as (tb, rb):
        for frm, to in ((c.node_id, b.node_id), (a.node_id, c.node_id)):
            async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
                async with session.ws_connect(f"https://{tb.advertise}{RAFT_PATH}", params={"from": a.node_id},
                                              ssl=client_context(a, verify_node_id=True),
                                              server_hostname=b.node_id) as ws:
                    await ws.send_bytes(msgpack.packb([encode_message(Heartbeat(frm=frm, to=to, term=1))]))
                    msg = await ws.receive(timeout=5)
                    assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.POLICY_VIOLATION
        await until(lambda: tb.inbound.streams_from() == {})
        assert rb.batches == []
        async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
            with pytest.raises(aiohttp.WSServerHandshakeError) as exc:      # the query claims another node
                await session.ws_connect(f"https://{tb.advertise}{RAFT_PATH}", params={"from": c.node_id},
                                         ssl=client_context(a, verify_node_id=True), server_hostname=b.node_id)
            assert exc.value.status == 403


async def test_a_peers_new_stream_replaces_the_one_it_gave_up_on(identities):
    """A peer holds one stream to a node: a second (its machine came back, a renewed
    certificate) closes the first, which would otherwise wait for a frame forever."""
    a, b, _ = identities
    async with endpoint(b) as (tb, rb):
        async with aiohttp.ClientSession(headers={versions.HEADER: str(versions.PROTOCOL)}) as session:
            def connect():
                return session.ws_connect(f"https://{tb.advertise}{RAFT_PATH}", params={"from": a.node_id},
                                          ssl=client_context(a, verify_node_id=True), server_hostname=b.node_id)
            first = await connect()
            await until(lambda: tb.inbound.streams_from() == {a.node_id: 1})
            second = await connect()
            msg = await first.receive(timeout=5)
            assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.GOING_AWAY
            await second.send_bytes(msgpack.packb([encode_message(Heartbeat(frm=a.node_id, to=b.node_id, term=1))]))
            await until(lambda: rb.batches)
            assert tb.inbound.streams_from() == {a.node_id: 1}
            await second.close()
