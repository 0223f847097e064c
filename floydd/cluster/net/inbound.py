"""The server side of the node-to-node routes: raft streams and batches, forwarded proposals
and reads.

A part of :class:`~floydd.cluster.net.transport.Transport`, using only its
:class:`~floydd.cluster.net.link.Link`. Every request's sender is the node named by the
verified client certificate (:func:`floydd.security.tls.peer_node_id`): a body or a raft
message claiming another is refused (403), and a verified sender's ``addr`` is learnt. The
answer to a proposal or read is ``{"ok": result, "by"}`` or an error
(:func:`floydd.cluster.net.wire.fail`); a ProposalDropped also says where the leader listens.

The raft stream (:meth:`Inbound.handle_stream`; its sending side is
:mod:`floydd.cluster.net.raftstream`) is a WebSocket whose frames are checked as a batch
request's body is, and before each frame the peer-certificate rule is asked again
(:data:`floydd.security.tls.PEER_STILL_ALLOWED`): a node removed while its stream is open is cut
off at its next frame. A frame that fails a check closes the stream (1008, the reason).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import msgpack
from aiohttp import web

from floydd import log
from floydd.cluster.net.link import Link
from floydd.cluster.net.raftstream import MAX_FRAME
from floydd.cluster.net.wire import MSGPACK, fail, timeout_of
from floydd.cluster.raft import Message, ProposalDropped, decode_message
from floydd.cluster.raft.errors import CodecError
from floydd.errors import FloyddError, InvalidSpec, Unauthorized, Unavailable
from floydd.security.tls import PEER_STANDING, PEER_STILL_ALLOWED, peer_node_id

__all__ = ["Inbound"]

_log = log.cluster.getChild("transport")


class Inbound:
    """Answers ``/cluster/v1/raft``, ``/propose`` and ``/read`` for the transport's receiver."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self.node_id = link.node_id
        self._streams: dict[web.WebSocketResponse, str] = {}

    async def handle_raft(self, request: web.Request) -> web.Response:
        peer, body = await self._read_body(request)
        try:
            self._deliver(peer, body.get("msgs"))
        except _Refused as exc:
            return fail(exc.error, exc.status)
        return web.Response(status=204)

    async def handle_stream(self, request: web.Request) -> web.StreamResponse:
        """The raft stream from a peer: each binary frame a list of encoded raft messages."""
        peer = peer_node_id(request)
        if peer is None:
            raise web.HTTPForbidden(text="a node certificate of this cluster is required")
        if request.query.get("from") != peer:
            _log.warning("[%s] refused a raft stream from %s claiming to be %r", self.node_id, peer,
                         request.query.get("from"))
            raise web.HTTPForbidden(text=f"certificate names {peer}, the request claims {request.query.get('from')!r}")
        if addr := request.query.get("addr"):
            self._link.set_peer(peer, addr)
        still_allowed = request.get(PEER_STILL_ALLOWED)
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME)
        await ws.prepare(request)
        for old in [w for w, p in self._streams.items() if p == peer]:
            # a peer holds one stream to us: an older one is a connection it gave up on (its
            # machine vanished, a renewed certificate), which would otherwise wait forever
            self._streams.pop(old, None)
            asyncio.ensure_future(old.close(code=aiohttp.WSCloseCode.GOING_AWAY))
        self._streams[ws] = peer
        try:
            await self._read_stream(peer, ws, still_allowed)
        finally:
            self._streams.pop(ws, None)
        return ws

    async def _read_stream(self, peer: str, ws: web.WebSocketResponse, still_allowed) -> None:
        async for frame in ws:
            why = None
            if frame.type is not aiohttp.WSMsgType.BINARY:
                why = f"a {frame.type.name} frame on the raft stream"
            elif still_allowed is not None and not still_allowed():
                why = "not a member of this cluster (any more)"
            else:
                try:
                    batch = msgpack.unpackb(frame.data, raw=False)
                except Exception as exc:
                    batch, why = None, f"a frame that is not msgpack: {exc}"
                try:
                    if why is None:
                        self._deliver(peer, batch)
                except _Refused as exc:
                    why = exc.error.message
            if why is not None:
                _log.warning("[%s] closed the raft stream from %s: %s", self.node_id, peer, why)
                await ws.close(code=aiohttp.WSCloseCode.POLICY_VIOLATION, message=why.encode()[:120])
                break

    def _deliver(self, peer: str, raw: object) -> None:
        """Decode and check one batch of raft messages from ``peer``, then hand it to the
        receiver (unless the test hook cuts the link); ``_Refused`` says why not."""
        if not isinstance(raw, list) or not all(type(b) is bytes for b in raw):
            raise _Refused(InvalidSpec("msgs must be a list of encoded raft messages"), 400)
        try:
            messages: list[Message] = [decode_message(b) for b in raw]
        except CodecError as exc:
            raise _Refused(exc, 400) from exc
        for m in messages:
            if m.frm != peer:
                _log.warning("[%s] refused raft messages from %s claiming to be from %s", self.node_id, peer, m.frm)
                raise _Refused(Unauthorized(f"node {peer} sent a message as {m.frm}", code="spoofed_sender"), 403)
            if m.to != self.node_id:
                raise _Refused(InvalidSpec(f"message for {m.to} sent to {self.node_id}", code="wrong_node"), 421)
        if self._link.dropped(peer, self.node_id):
            return
        if (receiver := self._link.receiver) is not None:
            receiver.on_raft(peer, messages)

    def streams_from(self) -> Counter[str]:
        """Peer -> raft streams it holds open to this node."""
        return Counter(self._streams.values())

    async def close_streams(self) -> None:
        """Close every raft stream peers hold open to this node (the node stops)."""
        await asyncio.gather(*(ws.close(code=aiohttp.WSCloseCode.GOING_AWAY) for ws in list(self._streams)),
                             return_exceptions=True)

    async def handle_propose(self, request: web.Request) -> web.Response:
        peer, body = await self._read_body(request)
        if self._link.dropped(peer, self.node_id):
            return fail(Unavailable("link cut"), 503)
        cmd, timeout, forwarded = body.get("cmd"), timeout_of(body.get("timeout")), body.get("fwd") is not False
        joining = request.get(PEER_STANDING) in ("joining", "unheard")   # set by require_peer_cert(standing=...)
        receiver = self._link.receiver
        return await self._answer(receiver.on_propose(cmd, timeout, forwarded, peer=peer, joining=joining)
                                  if receiver else None)

    async def handle_read(self, request: web.Request) -> web.Response:
        peer, body = await self._read_body(request)
        if self._link.dropped(peer, self.node_id):
            return fail(Unavailable("link cut"), 503)
        query, args = body.get("query"), body.get("args") or {}
        if not isinstance(query, str) or not isinstance(args, dict):
            return fail(InvalidSpec("a read names a query (str) and its args (dict)"), 400)
        timeout = timeout_of(body.get("timeout"))
        receiver = self._link.receiver
        return await self._answer(receiver.on_read(query, args, timeout) if receiver else None)

    async def _read_body(self, request: web.Request) -> tuple[str, dict]:
        peer = peer_node_id(request)        # parsed once per certificate
        if peer is None:
            raise web.HTTPForbidden(text="a node certificate of this cluster is required")
        try:
            body = msgpack.unpackb(await request.read(), raw=False)
        except Exception as exc:
            raise web.HTTPBadRequest(text=f"body is not msgpack: {exc}") from exc
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="body must be a msgpack map")
        if body.get("from") != peer:
            _log.warning("[%s] refused %s from %s claiming to be %r", self.node_id, request.path, peer,
                         body.get("from"))
            raise web.HTTPForbidden(text=f"certificate names {peer}, body claims {body.get('from')!r}")
        addr = body.get("addr")
        if isinstance(addr, str) and addr:
            self._link.set_peer(peer, addr)
        return peer, body

    async def _answer(self, pending) -> web.Response:
        if pending is None:
            return fail(Unavailable("this node's cluster service is not running"), 503)
        try:
            result = await pending
        except ProposalDropped as exc:      # with where the leader listens: a box not yet a member
            return fail(exc, exc.status, leader=exc.leader, by=self.node_id,    # may not know
                        leader_addr=self._link.address_of(exc.leader) if exc.leader else None)
        except FloyddError as exc:
            return fail(exc, exc.status, by=self.node_id)
        except asyncio.TimeoutError:
            return fail(Unavailable("not committed in time", hint="retry with the same idempotency key"), 503,
                        by=self.node_id)
        except (TypeError, ValueError) as exc:
            return fail(InvalidSpec(f"malformed request: {exc}"), 400, by=self.node_id)
        return web.Response(body=msgpack.packb({"ok": result, "by": self.node_id}, use_bin_type=True),
                            content_type=MSGPACK)


class _Refused(Exception):
    """A batch of raft messages that fails a check: the error and its HTTP status."""

    def __init__(self, error: FloyddError, status: int) -> None:
        super().__init__(error.message)
        self.error, self.status = error, status
