"""The cluster service's address book: where each peer is, and whom to ask when none leads.

A mixin of :class:`~floydd.cluster.service.ClusterService` (state lives on the service).
Peers' addresses come from three places, all into the transport's peer table: the
``node.upsert`` entries applied here (and the whole node table after a restored snapshot),
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
from typing import Any, Iterable

from floydd.cluster.driver.applied import Applied

__all__ = ["AddressBookMixin", "join_host_port"]


class AddressBookMixin:
    """Methods of ClusterService that learn and keep peers' addresses."""

    def on_discovered(self, peers: Iterable[Any]) -> None:
        """``Discovery(on_change=service.on_discovered)``: learn peers' addresses from mDNS
        (and static seeds, which have no node id yet: they become contacts to ask)."""
        for peer in peers:
            for address in peer.addresses[:1]:
                endpoint = join_host_port(address, peer.port)
                if peer.node_id is None:
                    if endpoint not in self._seeds:
                        self._seeds.append(endpoint)
                elif peer.node_id != self.node_id and peer.node_id not in self.state.removed:
                    self.transport.set_peer(peer.node_id, endpoint)

    async def _load_peers(self) -> dict[str, str]:
        """The address book an earlier run left in ``peers.json`` (empty if none)."""
        return await asyncio.to_thread(_read_peers, self._peers_file)

    def _contacts(self) -> list[str]:
        known = [a for n, a in self.transport.peers.items() if n != self.node_id]
        return list(dict.fromkeys(self._seeds + known))

    def _learn_addresses(self, event: Applied | None) -> None:
        if event is not None and not event.restored:
            cmd = event.command
            if cmd is None or cmd.get("op") != "node.upsert" or event.error is not None:
                return
            nodes = [event.result]
        else:
            nodes = list(self.state.nodes.values())
        for n in nodes:
            if n["id"] != self.node_id and n["address"]:
                self.transport.set_peer(n["id"], join_host_port(n["address"], n["cluster_port"]))

    def _peer_learnt(self, node_id: str, address: str) -> None:
        """Keep the address book on disk, so a restarted node can reach its peers even when
        its own log is behind (e.g. it was removed while it was away)."""
        if not self._peers_dirty and not self._closing:
            self._peers_dirty = True
            self._spawn(self._save_peers(), f"cluster-peers-{self.node_id[:6]}")

    async def _save_peers(self) -> None:
        await asyncio.sleep(0)          # batch what is learnt in the same loop iteration
        self._peers_dirty = False
        async with self._peers_lock:
            await asyncio.to_thread(_write_peers, self._peers_file, self.transport.peers)


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
