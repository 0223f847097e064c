"""Node-to-node traffic of the control plane: HTTPS with mutual TLS, msgpack bodies.

Routes (an aiohttp route table the node-to-node app mounts behind
:func:`floydd.security.tls.require_peer_cert`)::

    GET  /cluster/v1/raft     ?from=&addr= a WebSocket: binary frames, each a list of encoded raft
                              messages (the raft stream; nothing comes back on it)
    POST /cluster/v1/raft     {"from", "addr", "msgs": [encoded raft message, ...]} -> 204
                              (the same, one batch a request: senders of the release before)
    POST /cluster/v1/propose  {"from", "addr", "cmd", "timeout"}    -> {"ok": result, "by"}
    POST /cluster/v1/read     {"from", "addr", "query", "args", "timeout"} -> {"ok": result, "by"}
    POST /cluster/v1/snapshot a stream of frames: an InstallSnapshot and what rides
                              beside it -> 204

Errors answer ``{"error": {...floydd error payload}, "leader": id | None, "by"}`` with the
error's HTTP status. The sender named in ``from`` and in every raft message must be the node
named by the verified client certificate, else 403: a member cannot speak for another.
``addr`` is where the sender listens; a verified peer's address is learnt from it. A
proposal is stamped with the verified sender as its ``proposer`` (:mod:`floydd.cluster.state.authz`);
a sender whose join has not completed may only announce itself. A node that is not the
leader answers a proposal with ProposalDropped, the leader and its address (``leader_addr``).

Sending: :meth:`Transport.send` never blocks. Each peer has one sender task and a bounded
queue; the task takes whatever has queued up (coalescing up to ``max_batch`` messages into
one frame of the peer's raft stream, :mod:`floydd.cluster.net.raftstream`: a WebSocket on
``GET /cluster/v1/raft``; to a peer of the release before streams, one POST), backs off
exponentially while the peer cannot be reached, and tells the driver
``report_unreachable(peer)`` after a failed send. A full queue drops messages (raft
retransmits). Outgoing calls verify the peer's node id in the TLS handshake
(``server_hostname=<node id>``).

Its parts, each receiving the transport as a :class:`~floydd.cluster.net.link.Link`: the
server side of the routes (:mod:`floydd.cluster.net.inbound`) and the snapshots, which never
go in a batch: they stream, in chunks with what rides beside them, through
``/cluster/v1/snapshot`` (:mod:`floydd.cluster.net.snapshot_stream`). The wire's paths, error
answers and protocol check: :mod:`floydd.cluster.net.wire`.

``drop``, when set, is a test hook ``drop(frm, to) -> bool`` that makes the link from
``frm`` to ``to`` lose everything (a partition), on both the sending and receiving side.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Callable, Iterable

import aiohttp
import msgpack
from aiohttp import web

from floydd import log
from floydd.cluster.state import versions
from floydd.cluster.net.inbound import Inbound
from floydd.cluster.net.link import Receiver
from floydd.cluster.net.raftstream import OutStreams, StreamRefused
from floydd.cluster.net.routes import raft_routes
from floydd.cluster.net.snapshot_stream import SnapshotStream
from floydd.cluster.net.wire import (BY_STATUS, MSGPACK, PROPOSE_PATH, RAFT_PATH, READ_PATH, SNAPSHOT_PATH,
                                     error_from, error_response, protocol_middleware)
from floydd.cluster.raft import InstallSnapshot, Message, encode_message
from floydd.errors import InternalError, Unavailable
from floydd.unreachable import cannot_reach
from floydd.security.identity import NodeIdentity
from floydd.security.tls import client_context, time_trouble

__all__ = ["Transport", "Receiver", "RAFT_PATH", "PROPOSE_PATH", "READ_PATH", "SNAPSHOT_PATH", "MSGPACK",
           "error_response", "protocol_middleware"]

_log = log.cluster.getChild("transport")


class Transport:
    def __init__(self, identity: NodeIdentity, *, advertise: str | None = None, queue_size: int = 4096,
                 max_batch: int = 512, backoff: tuple[float, float] = (0.02, 1.0),
                 request_timeout: float = 5.0) -> None:
        self.node_id = identity.node_id
        self.advertise = advertise
        """``host:port`` of this node's node-to-node listener, told to every peer."""
        self.drop: Callable[[str, str], bool] | None = None
        self.on_peer: Callable[[str, str], None] | None = None
        """Called with (node id, address) whenever a peer's address is learnt or changes."""
        self.name_of: Callable[[str], str | None] = lambda _peer: None
        """A node's name for messages ("cannot reach box2 at ..."), from the replicated state."""
        self._identity = identity
        self._time_warned: set[str] = set()
        """Peers a TLS failure due to certificate dates was logged for (until a send succeeds)."""
        self._ssl: dict[bool, ssl.SSLContext] = {}
        self._queue_size, self._max_batch = queue_size, max_batch
        self._backoff, self._timeout = backoff, request_timeout
        self._addresses: dict[str, str] = {}
        self._queues: dict[str, asyncio.Queue] = {}
        self._senders: dict[str, asyncio.Task] = {}
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []    # pools of a certificate since renewed
        self._receiver: Receiver | None = None
        self._closed = False
        self.sent_batches = 0
        self.inbound = Inbound(self)
        """The server side of the raft, propose and read routes."""
        self.snapshots = SnapshotStream(self, timeout=request_timeout)
        """InstallSnapshots, streamed to and from peers."""
        self.streams = OutStreams(self, timeout=request_timeout, advertise=lambda: self.advertise)
        """The raft stream to each peer."""
        self._post_only: set[str] = set()
        """Peers that do not serve the raft stream (a release before it): sent POSTs until a send
        to them fails (they may come back upgraded)."""

    # -- wiring ----------------------------------------------------------------------------

    def attach(self, receiver: Receiver) -> None:
        self._receiver = receiver

    @property
    def receiver(self) -> Receiver | None:
        """The driver, once attached."""
        return self._receiver

    def routes(self) -> list[web.RouteDef]:
        """Raft and forwarding (:func:`floydd.cluster.net.routes.raft_routes`)."""
        return raft_routes(raft=self.inbound.handle_raft, stream=self.inbound.handle_stream,
                           propose=self.inbound.handle_propose, read=self.inbound.handle_read,
                           snapshot=self.snapshots.handle)

    def ssl_context(self, verify_node_id: bool) -> ssl.SSLContext:
        """Made on first use: a box alone (a cluster of one) has no certificate and no peers."""
        if verify_node_id not in self._ssl:
            self._ssl[verify_node_id] = client_context(self._identity, verify_node_id=verify_node_id)
        return self._ssl[verify_node_id]

    def set_peer(self, node_id: str, address: str) -> None:
        if node_id != self.node_id and self._addresses.get(node_id) != address:
            _log.info("[%s] peer %s is at %s", self.node_id, node_id, address)
            self._addresses[node_id] = address
            if self.on_peer is not None:
                self.on_peer(node_id, address)

    def address_of(self, node_id: str) -> str | None:
        """Where ``node_id`` listens for node-to-node traffic, if this node knows."""
        return self._addresses.get(node_id)

    @property
    def peers(self) -> dict[str, str]:
        return dict(self._addresses)

    def new_connections(self) -> None:
        """This node's certificate was renewed: later requests open new connections, which
        present it; the old pool is closed once requests already on it had time to finish
        (peers accept the previous certificate, not older ones)."""
        old, self._session = self._session, None
        if old is not None:
            self._retired.append(old)
            asyncio.get_running_loop().call_later(self._timeout + 1.0, self._close_retired, old)

    def _close_retired(self, session: aiohttp.ClientSession) -> None:
        if session in self._retired:
            self._retired.remove(session)
            asyncio.ensure_future(session.close())

    async def close(self) -> None:
        self._closed = True
        for session in self._retired:
            await session.close()
        self._retired.clear()
        senders = list(self._senders.values())
        for task in senders:
            task.cancel()
        senders += self.snapshots.close()
        await asyncio.gather(*senders, return_exceptions=True)
        self._senders.clear()
        await self.streams.close()
        await self.inbound.close_streams()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- sending raft messages ---------------------------------------------------------------

    def send(self, messages: Iterable[Message]) -> None:
        for m in messages:
            if isinstance(m, InstallSnapshot):
                self.snapshots.send(m)
                continue
            queue = self._queues.get(m.to)
            if queue is None:
                if self._closed:
                    return
                queue = self._queues[m.to] = asyncio.Queue(self._queue_size)
                self._senders[m.to] = asyncio.create_task(self._sender(m.to), name=f"raft-send-{m.to}")
            try:
                queue.put_nowait(m)
            except asyncio.QueueFull:
                self._lost(m.to, [m])

    async def _sender(self, peer: str) -> None:
        queue = self._queues[peer]
        delay = self._backoff[0]
        while True:
            batch = [await queue.get()]
            while len(batch) < self._max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            try:
                await self._deliver(peer, batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.debug("[%s] sending %d messages to %s failed: %s", self.node_id, len(batch), peer, exc)
                self._post_only.discard(peer)
                self._time_trouble(peer, exc)
                self._lost(peer, batch)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._backoff[1])
                continue
            delay = self._backoff[0]
            self._time_warned.discard(peer)
            self.sent_batches += 1
            if self._receiver is not None:
                for m in batch:
                    if isinstance(m, InstallSnapshot):
                        self._receiver.report_snapshot(peer, True)

    async def _deliver(self, peer: str, batch: list[Message]) -> None:
        if self.dropped(self.node_id, peer):
            raise Unavailable(f"link to {peer} is cut")
        address = self._addresses.get(peer)
        if address is None:
            raise Unavailable(f"no address known for {peer}")
        encoded = [encode_message(m) for m in batch]
        if peer not in self._post_only:
            try:
                await self.streams.send(peer, address, msgpack.packb(encoded, use_bin_type=True))
                return
            except StreamRefused as exc:
                _log.info("[%s] %s; sending it POSTs", self.node_id, exc)
                self._post_only.add(peer)
        await self._post_batch(peer, address, encoded)

    async def _post_batch(self, peer: str, address: str, encoded: list[bytes]) -> None:
        body = msgpack.packb({"from": self.node_id, "addr": self.advertise, "msgs": encoded}, use_bin_type=True)
        async with self.client().post(f"https://{address}{RAFT_PATH}", data=body, ssl=self.ssl_context(True),
                                       server_hostname=peer, headers={"Content-Type": MSGPACK},
                                       timeout=aiohttp.ClientTimeout(total=self._timeout)) as resp:
            if resp.status != 204:
                raise Unavailable(f"{peer} answered HTTP {resp.status}: {(await resp.text())[:200]}")

    def _time_trouble(self, peer: str, exc: BaseException) -> None:
        """A TLS failure caused by a certificate's dates (clocks apart): WARNING, once per peer
        until a send to it succeeds again (issue 21: it was an INFO line among many)."""
        why = time_trouble(exc)
        if why is not None and peer not in self._time_warned:
            self._time_warned.add(peer)
            _log.warning("[%s] TLS with %s failed: %s", self.node_id, peer, why)

    def _lost(self, peer: str, batch: list[Message]) -> None:
        receiver = self._receiver
        if receiver is None:
            return
        receiver.report_unreachable(peer)
        for m in batch:
            if isinstance(m, InstallSnapshot):
                receiver.report_snapshot(peer, False)

    # -- forwarded proposals and reads -----------------------------------------------------------

    async def forward_propose(self, cmd: dict, timeout: float, *, peer: str | None = None,
                              address: str | None = None, forwarded: bool = True) -> tuple[Any, str]:
        """Have ``peer`` (or whoever listens at ``address``) commit ``cmd``; (result, answering id).

        ``forwarded``: the receiver must be the leader (one hop); False lets it forward the
        command itself (a node that is not a member yet and knows only a seed address)."""
        return await self._call(PROPOSE_PATH, {"cmd": cmd, "timeout": timeout, "fwd": forwarded}, timeout,
                                peer, address)

    async def forward_read(self, query: str, args: dict, timeout: float, *, peer: str | None = None,
                           address: str | None = None) -> tuple[Any, str]:
        return await self._call(READ_PATH, {"query": query, "args": args, "timeout": timeout}, timeout, peer,
                                address)

    async def _call(self, path: str, body: dict, timeout: float, peer: str | None,
                    address: str | None) -> tuple[Any, str]:
        if peer is not None:
            if self.dropped(self.node_id, peer):
                raise Unavailable(f"link to {peer} is cut")
            address = self._addresses.get(peer)
            if address is None:
                raise Unavailable(f"no address known for {peer}", hint="wait for the membership to settle")
        elif address is None:
            raise ValueError("peer or address needed")
        body = msgpack.packb({"from": self.node_id, "addr": self.advertise, **body}, use_bin_type=True)
        kw = {"ssl": self.ssl_context(True), "server_hostname": peer} if peer else {"ssl": self.ssl_context(False)}
        try:
            async with self.client().post(f"https://{address}{path}", data=body, headers={"Content-Type": MSGPACK},
                                           timeout=aiohttp.ClientTimeout(total=timeout + 1.0), **kw) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._time_trouble(peer or address, exc)
            raise Unavailable(cannot_reach(self._called(peer) if peer else "a member", address, exc),
                              hint="retry; the request is idempotent") from exc
        try:
            payload = msgpack.unpackb(raw, raw=False)
        except Exception:
            payload = None
        if not isinstance(payload, dict):
            raise Unavailable(f"{peer or address} answered HTTP {status} without a msgpack body")
        if "error" in payload:
            lead, lead_addr = payload.get("leader"), payload.get("leader_addr")
            if isinstance(lead, str) and isinstance(lead_addr, str) and lead_addr and lead not in self._addresses:
                self.set_peer(lead, lead_addr)      # calls to it verify its node id in the handshake
            raise error_from(payload, status)
        return payload.get("ok"), str(payload.get("by"))

    async def fetch(self, peer: str, path: str, *, params: dict[str, str] | None = None,
                    timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        """GET ``path`` (a ``/cluster/v1/...`` route) from ``peer`` over mTLS, verifying its
        node id: (body, response headers). For bulky data that never goes through raft
        (store objects, job logs). An error payload becomes its FloyddError."""
        if self.dropped(self.node_id, peer):
            raise Unavailable(f"link to {peer} is cut")
        address = self._addresses.get(peer)
        if address is None:
            raise Unavailable(f"no address known for node {peer}", hint="wait for the membership to settle")
        try:
            async with self.client().get(f"https://{address}{path}", params=params, ssl=self.ssl_context(True),
                                          server_hostname=peer,
                                          timeout=aiohttp.ClientTimeout(total=timeout or 60.0)) as resp:
                raw = await resp.read()
                status, headers = resp.status, dict(resp.headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(cannot_reach(self._called(peer), address, exc),
                              hint="check that it is up (floyd nodes)") from exc
        if status >= 400:
            try:
                payload = msgpack.unpackb(raw, raw=False)
            except Exception:
                payload = None
            if isinstance(payload, dict) and "error" in payload:
                raise error_from(payload, status)
            raise BY_STATUS.get(status, InternalError)(f"node {peer} answered HTTP {status} for {path}")
        return raw, headers

    # -- helpers --------------------------------------------------------------------------------

    def client(self) -> aiohttp.ClientSession:
        if self._session is None:
            if self._closed:
                raise Unavailable("the transport is closed")
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                  headers={versions.HEADER: str(versions.PROTOCOL)})
        return self._session

    def _called(self, peer: str) -> str:
        """How a message names ``peer``: its name, else "node ID"."""
        try:
            name = self.name_of(peer)
        except Exception:
            name = None
        return name or f"node {peer}"

    def dropped(self, frm: str, to: str) -> bool:
        return self.drop is not None and self.drop(frm, to)
