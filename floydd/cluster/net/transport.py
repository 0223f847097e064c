"""Node-to-node traffic of the control plane: HTTPS with mutual TLS, msgpack bodies.

Routes (an aiohttp route table the node-to-node app mounts behind
:func:`floydd.security.tls.require_peer_cert`)::

    POST /cluster/v1/raft     {"from", "addr", "msgs": [encoded raft message, ...]} -> 204
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
one POST), backs off exponentially while the peer cannot be reached, and tells the driver:
``report_unreachable(peer)`` after a failed POST, ``report_snapshot(peer, ok)`` once a POST
carrying an InstallSnapshot succeeded or failed. A full queue drops messages (raft
retransmits). Outgoing calls verify the peer's node id in the TLS handshake
(``server_hostname=<node id>``).

Snapshots never go in a batch: they stream, in chunks with what rides beside them, through
``/cluster/v1/snapshot`` (:mod:`floydd.cluster.net.snapshot_stream`, a mixin of the transport).

``drop``, when set, is a test hook ``drop(frm, to) -> bool`` that makes the link from
``frm`` to ``to`` lose everything (a partition), on both the sending and receiving side.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, AsyncIterator, Callable, Iterable, Protocol

import aiohttp
import msgpack
from aiohttp import web

from floydd import log
from floydd.cluster.state import versions
from floydd.cluster.raft import InstallSnapshot, Message, ProposalDropped, decode_message, encode_message
from floydd.cluster.raft.errors import CodecError
from floydd.errors import (Conflict, FloyddError, InternalError, InvalidSpec, NotFound, Unauthorized, Unavailable,
                           UserError, from_payload)
from floydd.unreachable import cannot_reach
from floydd.security.identity import NodeIdentity
from floydd.cluster.net.routes import PROPOSE_PATH, RAFT_PATH, READ_PATH, SNAPSHOT_PATH, raft_routes
from floydd.cluster.net.snapshot_stream import SnapshotSink, SnapshotStreamMixin
from floydd.security.tls import PEER_STANDING, client_context, peer_node_id, time_trouble

__all__ = ["Transport", "Receiver", "RAFT_PATH", "PROPOSE_PATH", "READ_PATH", "SNAPSHOT_PATH", "MSGPACK",
           "error_response"]

MSGPACK = "application/msgpack"

_log = log.cluster.getChild("transport")


class Receiver(Protocol):
    """What the transport hands incoming traffic and delivery reports to (the driver)."""

    def on_raft(self, peer: str, messages: list[Message]) -> None: ...
    async def on_propose(self, cmd: dict, timeout: float, forwarded: bool, *, peer: str | None = None,
                         joining: bool = False) -> Any: ...
    async def on_read(self, query: str, args: dict, timeout: float) -> Any: ...
    def report_unreachable(self, peer: str) -> None: ...
    def report_snapshot(self, peer: str, ok: bool) -> None: ...
    def snapshot_source(self, message: InstallSnapshot) -> AsyncIterator[bytes]: ...
    def snapshot_sink(self, message: InstallSnapshot) -> SnapshotSink: ...


class Transport(SnapshotStreamMixin):
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
        self._snapshots: dict[str, asyncio.Task] = {}     # peer -> the snapshot being streamed to it
        self._receiving = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []    # pools of a certificate since renewed
        self._receiver: Receiver | None = None
        self._closed = False
        self.sent_batches = 0

    # -- wiring ----------------------------------------------------------------------------

    def attach(self, receiver: Receiver) -> None:
        self._receiver = receiver

    def routes(self) -> list[web.RouteDef]:
        return raft_routes(raft=self._handle_raft, propose=self._handle_propose, read=self._handle_read,
                           snapshot=self._handle_snapshot)

    def _ssl_context(self, verify_node_id: bool) -> ssl.SSLContext:
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
        senders = list(self._senders.values()) + list(self._snapshots.values())
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        self._senders.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- sending raft messages ---------------------------------------------------------------

    def send(self, messages: Iterable[Message]) -> None:
        for m in messages:
            if isinstance(m, InstallSnapshot):
                self._send_snapshot(m)
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
                await self._post_batch(peer, batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.debug("[%s] sending %d messages to %s failed: %s", self.node_id, len(batch), peer, exc)
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

    async def _post_batch(self, peer: str, batch: list[Message]) -> None:
        if self._dropped(self.node_id, peer):
            raise Unavailable(f"link to {peer} is cut")
        address = self._addresses.get(peer)
        if address is None:
            raise Unavailable(f"no address known for {peer}")
        body = msgpack.packb({"from": self.node_id, "addr": self.advertise,
                              "msgs": [encode_message(m) for m in batch]}, use_bin_type=True)
        async with self._client().post(f"https://{address}{RAFT_PATH}", data=body, ssl=self._ssl_context(True),
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
            if self._dropped(self.node_id, peer):
                raise Unavailable(f"link to {peer} is cut")
            address = self._addresses.get(peer)
            if address is None:
                raise Unavailable(f"no address known for {peer}", hint="wait for the membership to settle")
        elif address is None:
            raise ValueError("peer or address needed")
        body = msgpack.packb({"from": self.node_id, "addr": self.advertise, **body}, use_bin_type=True)
        kw = {"ssl": self._ssl_context(True), "server_hostname": peer} if peer else {"ssl": self._ssl_context(False)}
        try:
            async with self._client().post(f"https://{address}{path}", data=body, headers={"Content-Type": MSGPACK},
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
            raise _error_from(payload, status)
        return payload.get("ok"), str(payload.get("by"))

    async def fetch(self, peer: str, path: str, *, params: dict[str, str] | None = None,
                    timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        """GET ``path`` (a ``/cluster/v1/...`` route) from ``peer`` over mTLS, verifying its
        node id: (body, response headers). For bulky data that never goes through raft
        (store objects, job logs). An error payload becomes its FloyddError."""
        if self._dropped(self.node_id, peer):
            raise Unavailable(f"link to {peer} is cut")
        address = self._addresses.get(peer)
        if address is None:
            raise Unavailable(f"no address known for node {peer}", hint="wait for the membership to settle")
        try:
            async with self._client().get(f"https://{address}{path}", params=params, ssl=self._ssl_context(True),
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
                raise _error_from(payload, status)
            raise _BY_STATUS.get(status, InternalError)(f"node {peer} answered HTTP {status} for {path}")
        return raw, headers

    # -- server side --------------------------------------------------------------------------

    async def _handle_raft(self, request: web.Request) -> web.Response:
        peer, body = await self._read_body(request)
        raw = body.get("msgs")
        if not isinstance(raw, list) or not all(type(b) is bytes for b in raw):
            return _fail(InvalidSpec("msgs must be a list of encoded raft messages"), 400)
        try:
            messages = [decode_message(b) for b in raw]
        except CodecError as exc:
            return _fail(exc, 400)
        for m in messages:
            if m.frm != peer:
                _log.warning("[%s] refused raft messages from %s claiming to be from %s", self.node_id, peer, m.frm)
                return _fail(Unauthorized(f"node {peer} sent a message as {m.frm}", code="spoofed_sender"), 403)
            if m.to != self.node_id:
                return _fail(InvalidSpec(f"message for {m.to} sent to {self.node_id}", code="wrong_node"), 421)
        if self._dropped(peer, self.node_id):
            return web.Response(status=204)
        if self._receiver is not None:
            self._receiver.on_raft(peer, messages)
        return web.Response(status=204)

    async def _handle_propose(self, request: web.Request) -> web.Response:
        peer, body = await self._read_body(request)
        if self._dropped(peer, self.node_id):
            return _fail(Unavailable("link cut"), 503)
        cmd, timeout, forwarded = body.get("cmd"), _timeout(body.get("timeout")), body.get("fwd") is not False
        joining = request.get(PEER_STANDING) in ("joining", "unheard")   # set by require_peer_cert(standing=...)
        return await self._answer(self._receiver.on_propose(cmd, timeout, forwarded, peer=peer, joining=joining)
                                  if self._receiver else None)

    async def _handle_read(self, request: web.Request) -> web.Response:
        peer, body = await self._read_body(request)
        if self._dropped(peer, self.node_id):
            return _fail(Unavailable("link cut"), 503)
        query, args = body.get("query"), body.get("args") or {}
        if not isinstance(query, str) or not isinstance(args, dict):
            return _fail(InvalidSpec("a read names a query (str) and its args (dict)"), 400)
        timeout = _timeout(body.get("timeout"))
        return await self._answer(self._receiver.on_read(query, args, timeout) if self._receiver else None)

    def _peer(self, request: web.Request) -> str | None:
        """The verified peer's node id (parsed once per certificate, in peer_node_id)."""
        return peer_node_id(request)

    async def _read_body(self, request: web.Request) -> tuple[str, dict]:
        peer = self._peer(request)
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
            self.set_peer(peer, addr)
        return peer, body

    async def _answer(self, pending) -> web.Response:
        if pending is None:
            return _fail(Unavailable("this node's cluster service is not running"), 503)
        try:
            result = await pending
        except ProposalDropped as exc:      # with where the leader listens: a box not yet a member
            return _fail(exc, exc.status, leader=exc.leader, by=self.node_id,   # may not know
                         leader_addr=self._addresses.get(exc.leader) if exc.leader else None)
        except FloyddError as exc:
            return _fail(exc, exc.status, by=self.node_id)
        except asyncio.TimeoutError:
            return _fail(Unavailable("not committed in time", hint="retry with the same idempotency key"), 503,
                         by=self.node_id)
        except (TypeError, ValueError) as exc:
            return _fail(InvalidSpec(f"malformed request: {exc}"), 400, by=self.node_id)
        return web.Response(body=msgpack.packb({"ok": result, "by": self.node_id}, use_bin_type=True),
                            content_type=MSGPACK)

    # -- helpers --------------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
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

    def _dropped(self, frm: str, to: str) -> bool:
        return self.drop is not None and self.drop(frm, to)


def _timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 300:
        return 10.0
    return float(value)


@web.middleware
async def protocol_middleware(request: web.Request, handler):
    """Node-to-node requests say the sender's protocol (:data:`floydd.cluster.state.versions.HEADER`;
    none: an 0.1 box); only adjacent releases are answered, and every answer says ours."""
    theirs = request.headers.get(versions.HEADER)
    if not versions.peer_supported(theirs):
        log.cluster.warning("refused %s %s from %s: protocol %s is not adjacent to ours (%d)", request.method,
                     request.path, request.remote, theirs, versions.PROTOCOL)
        response = _fail(Conflict(f"this box speaks cluster protocol {versions.PROTOCOL}, yours {theirs}: "
                                  "releases more than one apart do not work together", code="protocol_too_far",
                                  hint="upgrade boxes one release at a time (docs/operations.md, \"Upgrades\")"), 409)
    else:
        response = await handler(request)
    if not response.prepared:           # a streamed answer has sent its headers already
        response.headers[versions.HEADER] = str(versions.PROTOCOL)
    return response


def error_response(exc: FloyddError) -> web.Response:
    """An error answer of a ``/cluster/v1`` route, as :meth:`Transport.fetch` reads it."""
    return _fail(exc, exc.status)


def _fail(exc: FloyddError, status: int, **extra: Any) -> web.Response:
    body = {**exc.to_payload(), **extra}
    return web.Response(status=status, body=msgpack.packb(body, use_bin_type=True), content_type=MSGPACK)


_BY_STATUS = {400: UserError, 403: Unauthorized, 404: NotFound, 409: Conflict, 503: Unavailable}


def _error_from(payload: dict, status: int) -> FloyddError:
    err = payload.get("error") if isinstance(payload.get("error"), dict) else {}
    kind = str(err.get("kind", ""))
    message, hint = str(err.get("message", f"HTTP {status}")), str(err.get("hint", ""))
    if kind in ("ProposalDropped", "ConfChangeRejected"):
        exc: FloyddError = ProposalDropped(message, leader=payload.get("leader"), hint=hint)
        exc.code = err.get("code") or exc.code
        return exc
    exc = from_payload(payload, status)
    if type(exc) is FloyddError:
        cls = _BY_STATUS.get(status, InternalError)
        exc = cls(message, hint=hint, code=err.get("code"))
    return exc

