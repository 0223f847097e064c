"""Snapshots stream: how the transport sends an InstallSnapshot and what rides beside it.

An InstallSnapshot never goes in a batch of raft messages: a task of its own POSTs it to
``/cluster/v1/snapshot`` as a chunked stream of frames (one byte of kind, four of length, at
most :data:`MAX_FRAME` bytes of payload)::

    m  the encoded message, in pieces of up to 1 MiB (the state's hot part is its data)
    a  a chunk of what the receiver's ``snapshot_source(message)`` yields (the archive of
       finished jobs, :mod:`floydd.cluster.state.archive`), any number of them
    e  the end

The receiver reads it as it comes (no body-size limit: a snapshot is as big as the cluster's
history), hands each ``a`` chunk to ``snapshot_sink(message).add`` (staged on disk), and only
after ``e`` gives the message to raft. Heartbeats and other messages to the peer keep
flowing meanwhile; the outcome is reported with ``report_snapshot`` as before. One snapshot
at a time per peer (the core sends the next only after that report), one received at a time.

A part of :class:`~floydd.cluster.net.transport.Transport`, using only its
:class:`~floydd.cluster.net.link.Link` (addresses, session, TLS context, drop hook and
receiver); the receiver (the raft driver) provides ``snapshot_source`` and ``snapshot_sink``.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import aiohttp
import msgpack
from aiohttp import web

from floydd import log
from floydd.cluster.net.link import Link, SnapshotSink
from floydd.cluster.net.wire import MSGPACK
from floydd.cluster.raft import InstallSnapshot, decode_message, encode_message
from floydd.cluster.raft.errors import CodecError
from floydd.unreachable import why
from floydd.cluster.net.routes import SNAPSHOT_PATH
from floydd.errors import FloyddError, InternalError, InvalidSpec, Unauthorized, Unavailable
from floydd.security.tls import peer_node_id

__all__ = ["SnapshotStream", "SnapshotSink", "SNAPSHOT_PATH", "MAX_FRAME"]

MAX_FRAME = 16 << 20
"""The largest frame of a snapshot stream a receiver takes (the message goes in 1 MiB pieces,
the archive in chunks of :data:`~floydd.cluster.state.archive.EXPORT_ROWS` rows, ~0.4 MB)."""
_PIECE = 1 << 20

_log = log.cluster.getChild("transport")


class SnapshotStream:
    """The snapshot half of the transport: one sending task per peer, one receiving at a time."""

    def __init__(self, link: Link, *, timeout: float) -> None:
        self._link = link
        self.node_id = link.node_id
        self._timeout = timeout
        self._sending: dict[str, asyncio.Task] = {}     # peer -> the snapshot being streamed to it
        self._receiving = asyncio.Lock()
        self._closed = False

    def send(self, m: InstallSnapshot) -> None:
        running = self._sending.get(m.to)
        if self._closed or (running is not None and not running.done()):
            return                  # the core sends the next one only after hearing of this one
        task = asyncio.create_task(self._stream_snapshot(m), name=f"raft-snapshot-{m.to}")
        self._sending[m.to] = task

    def close(self) -> list[asyncio.Task]:
        """Send no more; the streams under way, cancelled (for the transport to await)."""
        self._closed = True
        tasks = list(self._sending.values())
        for task in tasks:
            task.cancel()
        return tasks

    async def _stream_snapshot(self, m: InstallSnapshot) -> None:
        peer, ok = m.to, False
        try:
            await self._post_snapshot(m)
            ok = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log.info("[%s] streaming the snapshot at %d to %s failed: %s", self.node_id, m.snapshot.index, peer,
                      why(exc))
        if (receiver := self._link.receiver) is not None:
            if not ok:
                receiver.report_unreachable(peer)
            receiver.report_snapshot(peer, ok)

    async def _post_snapshot(self, m: InstallSnapshot) -> None:
        peer = m.to
        if self._link.dropped(self.node_id, peer):
            raise Unavailable(f"link to {peer} is cut")
        address = self._link.address_of(peer)
        if address is None:
            raise Unavailable(f"no address known for {peer}")
        receiver = self._link.receiver
        source = receiver.snapshot_source(m) if receiver is not None else None
        started, sent = asyncio.get_running_loop().time(), 0

        async def frames() -> AsyncIterator[bytes]:
            nonlocal sent
            data = encode_message(m)
            for i in range(0, len(data), _PIECE):
                yield _frame(b"m", data[i:i + _PIECE])
            if source is not None:
                async for chunk in source:          # whole chunks: the sink decodes each alone
                    if len(chunk) > MAX_FRAME:
                        raise InternalError(f"a snapshot chunk of {len(chunk)} bytes (at most {MAX_FRAME})")
                    yield _frame(b"a", chunk)
                    sent += len(chunk)
            yield _frame(b"e", b"")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=6 * self._timeout)
        async with self._link.client().post(f"https://{address}{SNAPSHOT_PATH}", data=frames(),
                                            ssl=self._link.ssl_context(True), server_hostname=peer,
                                            headers={"Content-Type": MSGPACK}, timeout=timeout) as resp:
            if resp.status != 204:
                raise Unavailable(f"{peer} answered HTTP {resp.status}: {(await resp.text())[:200]}")
        _log.info("[%s] snapshot at %d streamed to %s: %d bytes of state, %d beside it, in %.2fs", self.node_id,
                  m.snapshot.index, peer, len(m.snapshot.data), sent, asyncio.get_running_loop().time() - started)

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /cluster/v1/snapshot``: read the stream as it comes; raft gets the message last."""
        peer = peer_node_id(request)
        if peer is None:
            raise web.HTTPForbidden(text="a node certificate of this cluster is required")
        reader = request.content
        try:
            data = bytearray()
            kind, payload = await _read_frame(reader)
            while kind == b"m":
                data += payload
                kind, payload = await _read_frame(reader)
            m = decode_message(bytes(data))
        except CodecError as exc:
            return _refuse(exc, 400)
        if not isinstance(m, InstallSnapshot):
            return _refuse(InvalidSpec("a snapshot stream starts with an InstallSnapshot"), 400)
        if m.frm != peer:
            _log.warning("[%s] refused a snapshot from %s claiming to be from %s", self.node_id, peer, m.frm)
            return _refuse(Unauthorized(f"node {peer} sent a snapshot as {m.frm}", code="spoofed_sender"), 403)
        if m.to != self.node_id:
            return _refuse(InvalidSpec(f"snapshot for {m.to} sent to {self.node_id}", code="wrong_node"), 421)
        receiver = self._link.receiver
        if self._link.dropped(peer, self.node_id) or receiver is None:
            return web.Response(status=204)
        async with self._receiving:
            sink = receiver.snapshot_sink(m)
            try:
                while kind == b"a":
                    await sink.add(payload)
                    kind, payload = await _read_frame(reader)
                if kind != b"e":
                    raise CodecError(f"unknown frame {kind!r} in a snapshot stream")
                await sink.finish()
            except (CodecError, InvalidSpec) as exc:
                return _refuse(exc, 400)
            receiver.on_raft(peer, [m])
        return web.Response(status=204)


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


async def _read_frame(reader) -> tuple[bytes, bytes]:
    """One frame of a snapshot stream: (kind, payload); a stream cut short raises CodecError."""
    try:
        head = await reader.readexactly(5)
        size = int.from_bytes(head[1:], "big")
        if size > MAX_FRAME:
            raise CodecError(f"a frame of {size} bytes (at most {MAX_FRAME})")
        return head[:1], await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise CodecError("the snapshot stream ended before its end frame") from None


def _refuse(exc: FloyddError, status: int) -> web.Response:
    return web.Response(status=status, body=msgpack.packb(exc.to_payload(), use_bin_type=True), content_type=MSGPACK)
