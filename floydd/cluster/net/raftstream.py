"""The sending side of the raft stream: one WebSocket per peer that this node's raft messages
to it go through, as binary frames (a msgpack list of encoded messages each).

Why a stream: a heartbeat sent as its own HTTPS POST, and its answer as another POST the
other way, cost ~1 ms of CPU on each side (aiohttp's request and response machinery, TLS
records, headers); an idle member spent over 1 % of a core on the four heartbeats a second
(issue 23). A frame on an open stream costs a fraction of that. The answers to this node's
messages come back on the peer's own stream to this node, so each direction has one stream
and both stay in order.

A stream opens on the first send (``GET`` :data:`~floydd.cluster.net.routes.RAFT_PATH` with
the WebSocket upgrade, behind the same mTLS and peer-certificate check as every node-to-node
request; the receiver asks that check again before each frame). It is dropped and opened
again on the next send when a send fails, when the peer's address changes, when this node's
certificate is renewed (a new session) or when the peer closes it. WebSocket pings every
:data:`PING_EVERY` seconds with no traffic find a peer whose machine vanished without
closing the connection. A peer of the release before streams answers the upgrade 404 or
405: :class:`StreamRefused`, and the transport sends to it by POST
(:meth:`~floydd.cluster.net.transport.Transport.send`).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from floydd import log
from floydd.cluster.net.link import Link
from floydd.cluster.net.routes import RAFT_PATH
from floydd.errors import Unavailable

__all__ = ["OutStreams", "StreamRefused", "PING_EVERY", "MAX_FRAME"]

_log = log.cluster.getChild("transport")

PING_EVERY = 5.0
"""Seconds without traffic on a stream before a ping; no pong within half of it closes it."""

MAX_FRAME = 64 << 20
"""The largest frame either side takes: a batch of raft messages (the POST body's cap)."""


class StreamRefused(Exception):
    """The peer does not serve the raft stream (a release before it): send it POSTs."""


class _Held:
    __slots__ = ("session", "address", "ws", "reader")

    def __init__(self, session: aiohttp.ClientSession, address: str, ws: aiohttp.ClientWebSocketResponse,
                 reader: asyncio.Task) -> None:
        self.session, self.address, self.ws, self.reader = session, address, ws, reader


class OutStreams:
    """This node's open raft streams, one per peer; used by each peer's sender task only."""

    def __init__(self, link: Link, *, timeout: float, advertise=lambda: None) -> None:
        self._link, self._timeout, self._advertise = link, timeout, advertise
        self._held: dict[str, _Held] = {}
        self.opened = 0
        """Streams opened since start (tests; a healthy link opens one)."""

    async def send(self, peer: str, address: str, frame: bytes) -> None:
        """Send one frame to ``peer`` at ``address``, opening the stream first if needed.
        Raises (Unavailable, StreamRefused, a connection error) with the stream dropped."""
        ws = await self._stream(peer, address)
        try:
            await ws.send_bytes(frame)
        except BaseException:
            self.drop(peer)
            raise

    async def _stream(self, peer: str, address: str) -> aiohttp.ClientWebSocketResponse:
        session = self._link.client()
        held = self._held.get(peer)
        if held is not None:
            if held.session is session and held.address == address and not held.ws.closed:
                return held.ws
            self.drop(peer)
        params = {"from": self._link.node_id}
        if (advertise := self._advertise()) is not None:
            params["addr"] = advertise
        try:
            ws = await asyncio.wait_for(session.ws_connect(
                f"https://{address}{RAFT_PATH}", params=params, ssl=self._link.ssl_context(True),
                server_hostname=peer, heartbeat=PING_EVERY, max_msg_size=MAX_FRAME,
                timeout=aiohttp.ClientWSTimeout(ws_close=1.0)),
                self._timeout)
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status in (404, 405):
                raise StreamRefused(f"{peer} does not serve the raft stream (HTTP {exc.status})") from exc
            raise Unavailable(f"{peer} refused the raft stream: HTTP {exc.status} {exc.message}") from exc
        self.opened += 1
        reader = asyncio.create_task(self._watch(peer, ws), name=f"raft-stream-{peer}")
        self._held[peer] = _Held(session, address, ws, reader)
        return ws

    async def _watch(self, peer: str, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Read what the peer sends this way: nothing but pongs and a close (which ends it)."""
        async for msg in ws:
            _log.debug("[%s] unexpected %s on the raft stream to %s", self._link.node_id, msg.type, peer)
        if ws.close_code not in (None, aiohttp.WSCloseCode.OK, aiohttp.WSCloseCode.GOING_AWAY):
            _log.info("[%s] %s closed the raft stream: %s %s", self._link.node_id, peer, ws.close_code,
                      ws.exception() or "")

    def drop(self, peer: str) -> None:
        """Close ``peer``'s stream (if open); the next send opens a new one."""
        held = self._held.pop(peer, None)
        if held is not None:
            held.reader.cancel()
            if not held.ws.closed:
                asyncio.ensure_future(_quietly(held.ws.close()))

    async def close(self) -> None:
        held, self._held = list(self._held.values()), {}
        for h in held:
            h.reader.cancel()
        await asyncio.gather(*(_quietly(h.ws.close()) for h in held), *(h.reader for h in held),
                             return_exceptions=True)


async def _quietly(aw) -> None:
    with contextlib.suppress(Exception):
        await aw
