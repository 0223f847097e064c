"""The named interfaces between the transport and its parts, and between it and the driver.

:class:`Receiver` is what the transport hands incoming traffic and delivery reports to (the
raft driver). :class:`Link` is what the transport's parts (:mod:`~floydd.cluster.net.inbound`,
:mod:`~floydd.cluster.net.snapshot_stream`) use of the transport: each receives it in its
constructor and uses only this.
"""

from __future__ import annotations

import ssl
from typing import Any, AsyncIterator, Protocol

import aiohttp

from floydd.cluster.raft import InstallSnapshot, Message

__all__ = ["Receiver", "SnapshotSink", "Link"]


class SnapshotSink(Protocol):
    """Where a received snapshot's chunks go before its message reaches raft."""

    async def add(self, chunk: bytes) -> None: ...
    async def finish(self) -> None: ...


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


class Link(Protocol):
    """What a part of the transport uses of it."""

    node_id: str
    """This node."""

    @property
    def receiver(self) -> Receiver | None:
        """The driver, once attached (None before: traffic is refused or dropped)."""

    def address_of(self, node_id: str) -> str | None:
        """Where ``node_id`` listens, if known."""

    def set_peer(self, node_id: str, address: str) -> None:
        """Learn (or update) where a verified peer listens."""

    def dropped(self, frm: str, to: str) -> bool:
        """Whether the test hook cuts the link from ``frm`` to ``to``."""

    def client(self) -> aiohttp.ClientSession:
        """The session outgoing requests share (Unavailable once the transport is closed)."""

    def ssl_context(self, verify_node_id: bool) -> ssl.SSLContext:
        """The client TLS context, verifying the peer's node id or not."""
