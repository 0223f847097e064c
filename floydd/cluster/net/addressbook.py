"""The cluster service's address book: where each peer is, and whom to ask when none leads.

A part of :class:`~floydd.cluster.service.ClusterService` (:class:`AddressBook`, its
``addresses``). Peers' addresses come from three places, all into the transport's peer table:
the ``node.upsert`` entries applied here (and the whole node table after a restored snapshot),
discovery (mDNS peers; static seeds, which have no node id yet, become contacts to ask),
and ``peers.json``, the table as it was, kept on disk so that a restarted node can reach its
peers even when its own log is behind (e.g. it was removed while it was away). Every
address the transport learns is saved again, batched, one writer at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Callable, Coroutine, Iterable

from floydd.cluster.driver.applied import Applied
from floydd.cluster.net.transport import Transport
from floydd.cluster.state.machine import ClusterState

__all__ = ["AddressBook", "join_host_port"]


class AddressBook:
    """Learns and keeps peers' addresses in ``transport``'s peer table and in ``folder/peers.json``;
    reads ``state``'s node table; saves through ``spawn`` (the service's tasks)."""

    def __init__(self, *, node_id: str, state: ClusterState, transport: Transport, folder: Path,
                 spawn: Callable[[Coroutine[Any, Any, None], str], None]) -> None:
        self.node_id = node_id
        self._state, self._transport, self._spawn = state, transport, spawn
        self.seeds: list[str] = []
        """Addresses to ask that have no node id yet (``floydd join``, static seeds)."""
        self._file = folder / "peers.json"
        self._dirty = False
        self._lock = asyncio.Lock()     # one writer of peers.json at a time (they share a temp file)
        self._stopped = False

    def add_seeds(self, addresses: Iterable[str]) -> None:
        """Ask these first when no leader is known (the addresses given to ``floydd join``)."""
        self.seeds = list(dict.fromkeys([*addresses, *self.seeds]))

    def stop(self) -> None:
        """The service is closing: write ``peers.json`` no more."""
        self._stopped = True

    def on_discovered(self, peers: Iterable[Any]) -> None:
        """Learn peers' addresses from mDNS (and static seeds, which have no node id yet: they
        become contacts to ask)."""
        for peer in peers:
            for address in peer.addresses[:1]:
                endpoint = join_host_port(address, peer.port)
                if peer.node_id is None:
                    if endpoint not in self.seeds:
                        self.seeds.append(endpoint)
                elif peer.node_id != self.node_id and peer.node_id not in self._state.removed:
                    self._transport.set_peer(peer.node_id, endpoint)

    async def load(self) -> dict[str, str]:
        """The address book an earlier run left in ``peers.json`` (empty if none)."""
        return await asyncio.to_thread(_read_peers, self._file)

    def contacts(self) -> list[str]:
        """Whom to ask when no leader is known: the seeds, then every peer's address."""
        known = [a for n, a in self._transport.peers.items() if n != self.node_id]
        return list(dict.fromkeys(self.seeds + known))

    def learn(self, event: Applied | None) -> None:
        """On each applied entry (``None``: the whole node table): a node's announced address."""
        if event is not None and not event.restored:
            cmd = event.command
            if cmd is None or cmd.get("op") != "node.upsert" or event.error is not None:
                return
            nodes = [event.result]
        else:
            nodes = list(self._state.nodes.values())
        for n in nodes:
            if n["id"] != self.node_id and n["address"]:
                self._transport.set_peer(n["id"], join_host_port(n["address"], n["cluster_port"]))

    def peer_learnt(self, node_id: str, address: str) -> None:
        """``transport.on_peer``: keep the address book on disk, so a restarted node can reach
        its peers even when its own log is behind (e.g. it was removed while it was away)."""
        if not self._dirty and not self._stopped:
            self._dirty = True
            self._spawn(self._save(), f"cluster-peers-{self.node_id[:6]}")

    async def _save(self) -> None:
        await asyncio.sleep(0)          # batch what is learnt in the same loop iteration
        self._dirty = False
        async with self._lock:
            await asyncio.to_thread(_write_peers, self._file, self._transport.peers)


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _read_peers(path: Path) -> dict[str, str]:
    try:
        peers = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in peers.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(peers, dict) else {}


def _write_peers(path: Path, peers: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(peers, indent=1, sort_keys=True))
    os.replace(tmp, path)
