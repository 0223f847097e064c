"""Find the other nodes of this cluster on the LAN (zeroconf/mDNS), plus static seeds.

Each node announces one service, ``<node-id>._floydd._tcp.local.``: its SRV record carries
the node-to-node port, its TXT record

    cfp   cluster fingerprint; nodes of other clusters are ignored
    nid   node id
    api   API port
    pv    discovery protocol version (:data:`PROTOCOL_VERSION`)
    name  the node's human name (optional)

Liveness is ours, not python-zeroconf's ``AsyncServiceBrowser``'s: zeroconf raises the TTL
of every PTR record it receives to at least 1125 s (its ``_DNS_PTR_MIN_TTL`` guard), so a box
that loses power would stay listed for ~19 minutes, and once dropped it would never be
reported again while its PTR sits in the cache. Instead:

- a record listener sees every mDNS record that arrives; any record of a peer's service
  (PTR, SRV, TXT, or the A record of its host) marks it seen now, and an instance not yet
  known is resolved (``AsyncServiceInfo.async_request``) and its TXT checked;
- every ``query_interval`` (jittered) a node multicasts one PTR question for the service
  type; every live node answers by multicast, so one question refreshes every table (a
  responder repeats a record at most once a second, which bounds the chatter);
- a peer not heard from for ``expire_after`` (default: 3 intervals, at least 3 s, since a
  peer's records come at most once a second) is dropped, checked once per interval, so it
  goes within ``expire_after + query_interval``; a goodbye (TTL 0, sent by :meth:`close`)
  drops it at once; it is listed again on the first answer after it comes back.

A new node is listed by its peers ~1.2 s after :meth:`Discovery.start` begins: zeroconf probes
the name three times, 500 ms apart, before announcing it; a node id already announced (a
copied state dir) is refused with :class:`~floydd.errors.Conflict`. The new node's own table
fills within ~0.2 s (its first question is sent before probing).

Static seeds (``seeds=["10.0.0.5:7654"]``) are for routed networks without multicast: they
are listed with ``node_id=None`` until the cluster layer has talked to them and calls
:meth:`Discovery.resolve_seed`. Discovery never judges whether a seed is alive.

Run ``python -m floydd.cluster.net.discovery --help`` to watch discovery on a real network
(the tool lives in :mod:`floydd.cluster.net.discovery_watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import ifaddr
from zeroconf import (DNSAddress, DNSOutgoing, DNSPointer, DNSQuestion, DNSService, DNSText, InterfaceChoice,
                      IPVersion, NonUniqueNameException, RecordUpdate, RecordUpdateListener, Zeroconf)
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from floydd import log
from floydd.cluster.net.seeds import Seed, parse_seed, parse_seeds
from floydd.errors import Conflict, Unavailable
from floydd.tasks import cancel_and_wait

__all__ = ["SERVICE_TYPE", "PROTOCOL_VERSION", "Peer", "OnChange", "Discovery", "main"]

SERVICE_TYPE = "_floydd._tcp.local."
PROTOCOL_VERSION = 1

OnChange = Callable[[tuple["Peer", ...]], object]
"""Called (in the event loop, synchronously) with every peer whenever the list changes."""

_log = log.cluster.getChild("discovery")  # floydd.cluster.net.discovery; every line names its node

# DNS wire constants (RFC 1035) for the one question we send ourselves.
_FLAGS_QUERY = 0x0000
_TYPE_PTR = 12
_CLASS_IN = 1
_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")  # one DNS label, <= 63 bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Peer:
    """Another node of this cluster, as discovery knows it.

    ``node_id`` is None for a static seed not yet resolved by the cluster layer.
    ``last_seen`` is the event loop's clock (``loop.time()``) when an mDNS record of the
    peer last arrived; None for seeds, whose liveness discovery cannot tell.
    """

    node_id: str | None
    addresses: tuple[str, ...]
    port: int
    api_port: int | None = None
    name: str | None = None
    protocol: int | None = None
    source: Literal["mdns", "seed"] = "mdns"
    last_seen: float | None = None

    @property
    def endpoints(self) -> tuple[tuple[str, int], ...]:
        """``(address, port)`` pairs to try for the node-to-node listener."""
        return tuple((a, self.port) for a in self.addresses)


class Discovery:
    """Announce this node and keep a table of the live peers of the same cluster.

    ``interfaces`` are the local addresses to run mDNS on (default: every interface);
    ``addresses`` are the ones announced (default: ``interfaces``, or every non-loopback
    address). Use as ``async with Discovery(...) as d:`` or ``await start()`` / ``close()``.
    """

    def __init__(self, *, fingerprint: str, node_id: str, port: int, api_port: int | None = None,
                 name: str | None = None, interfaces: Sequence[str] | None = None,
                 addresses: Sequence[str] | None = None, seeds: Iterable[str] = (),
                 on_change: OnChange | None = None, query_interval: float = 5.0,
                 expire_after: float | None = None, resolve_timeout: float = 3.0,
                 ip_version: IPVersion = IPVersion.V4Only) -> None:
        if not fingerprint or len(fingerprint) > 200:
            raise ValueError("fingerprint must be 1 to 200 characters")
        if not _NODE_ID.match(node_id):
            raise ValueError(f"node id {node_id!r} must be one DNS label: letters, digits, '-', '_'")
        if not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
        if query_interval <= 0:
            raise ValueError("query_interval must be positive")
        self._fingerprint = fingerprint
        self._node_id = node_id
        self._port = port
        self._api_port = api_port if api_port is not None else port
        self._name = name
        self._interfaces = list(interfaces) if interfaces is not None else None
        self._addresses = list(addresses) if addresses is not None else None
        self._on_change = on_change
        self._query_interval = query_interval
        self._expire_after = expire_after if expire_after is not None else max(3 * query_interval, 3.0)
        self._resolve_timeout_ms = int(resolve_timeout * 1000)
        self._ip_version = ip_version
        self._instance = f"{node_id}.{SERVICE_TYPE}".lower()
        self._seeds: dict[Seed, str | None] = dict.fromkeys(parse_seeds(seeds))
        self._known: dict[str, Peer] = {}        # instance key -> peer of our cluster
        self._servers: dict[str, str] = {}       # host name key -> instance key
        self._foreign: set[str] = set()          # instance keys of other clusters (or stale selves)
        self._resolving: dict[str, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._listener = _Listener(self)
        self._azc: AsyncZeroconf | None = None
        self._info: AsyncServiceInfo | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_view: tuple[Peer, ...] = ()

    # -- public --------------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def peers(self) -> dict[str, Peer]:
        """Peers with a known node id: discovered ones, and seeds the cluster layer resolved."""
        table: dict[str, Peer] = {}
        for (host, port), node_id in self._seeds.items():
            if node_id is not None and node_id != self._node_id:
                table[node_id] = Peer(node_id=node_id, addresses=(host,), port=port, source="seed")
        for peer in self._known.values():
            table[peer.node_id] = peer
        return dict(sorted(table.items()))

    def snapshot(self) -> tuple[Peer, ...]:
        """Every peer, unresolved seeds last: what ``on_change`` receives."""
        unresolved = tuple(Peer(node_id=None, addresses=(host,), port=port, source="seed")
                           for (host, port), node_id in self._seeds.items() if node_id is None)
        return tuple(self.peers.values()) + unresolved

    def resolve_seed(self, seed: str, node_id: str) -> None:
        """The cluster layer learnt which node answers at ``seed`` (``HOST:PORT``)."""
        key = parse_seed(seed)
        if key not in self._seeds:
            raise KeyError(f"{seed} is not a seed of this node")
        self._seeds[key] = node_id
        self._notify()

    async def start(self) -> None:
        """Join mDNS, start asking and announce this node; returns once the name is ours
        (probed, ~1 s) and the first announcement is on its way."""
        if self._azc is not None:
            raise RuntimeError("discovery already started")
        self._loop = asyncio.get_running_loop()
        addresses = self._addresses if self._addresses is not None else _default_addresses(self._interfaces)
        if not addresses:
            raise Unavailable("no network address to announce for discovery",
                              hint="give the addresses (or interfaces) that other nodes can reach")
        interfaces = self._interfaces if self._interfaces is not None else InterfaceChoice.All
        self._azc = AsyncZeroconf(interfaces=interfaces, ip_version=self._ip_version)
        self._azc.zeroconf.async_add_listener(self._listener, None)
        self._spawn(self._ask_periodically())
        properties = {"cfp": self._fingerprint, "nid": self._node_id, "api": str(self._api_port),
                      "pv": str(PROTOCOL_VERSION)}
        if self._name:
            properties["name"] = self._name
        self._info = AsyncServiceInfo(SERVICE_TYPE, f"{self._node_id}.{SERVICE_TYPE}", port=self._port,
                                      properties=properties, parsed_addresses=addresses,
                                      server=f"floydd-{self._node_id}.local.")
        try:
            # Returns after probing the name; the announcement's two repeats go on in a task.
            self._own(await self._azc.async_register_service(self._info))
        except NonUniqueNameException:
            self._info = None
            await self.close()
            raise Conflict(f"another node on this network already announces node id {self._node_id}",
                           hint="two boxes share one state dir copy; give one of them a fresh state dir") from None
        except BaseException:
            self._info = None
            await self.close()
            raise
        _log.info("[%s] discovery announced on %s (cluster %s)", self._node_id, ", ".join(addresses),
                  self._fingerprint[:12])
        self._notify()

    async def close(self) -> None:
        """Say goodbye (peers drop us at once) and leave mDNS. Safe to call twice."""
        azc, self._azc = self._azc, None
        if azc is None:
            return
        await cancel_and_wait(self._tasks)
        azc.zeroconf.async_remove_listener(self._listener)
        info, self._info = self._info, None
        if info is not None:
            with contextlib.suppress(Exception):
                await (await azc.async_unregister_service(info))
        await azc.async_close()
        self._known.clear()
        self._servers.clear()
        _log.info("[%s] discovery closed", self._node_id)

    async def __aenter__(self) -> Discovery:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- records in ----------------------------------------------------------------------

    def _on_records(self, now_ms: float, updates: list[RecordUpdate]) -> None:
        suffix = "." + SERVICE_TYPE
        for update in updates:
            record = update.new
            if isinstance(record, DNSPointer):
                if record.key != SERVICE_TYPE:
                    continue
                instance = record.alias.lower()
            elif isinstance(record, (DNSService, DNSText)):
                if not record.key.endswith(suffix):
                    continue
                instance = record.key
            elif isinstance(record, DNSAddress):
                instance = self._servers.get(record.key)
                if instance is None:
                    continue
            else:
                continue
            if instance == self._instance:
                continue
            if record.ttl == 0:  # a goodbye
                if isinstance(record, (DNSPointer, DNSService)):
                    self._forget(instance, "said goodbye")
                continue
            if record.is_expired(now_ms):
                continue  # zeroconf's cache letting go; liveness is judged by _ask_periodically
            changed = update.old is None and not isinstance(record, DNSPointer)
            if instance in self._known:
                self._known[instance] = replace(self._known[instance], last_seen=self._loop.time())
                if changed:
                    self._resolve(instance)
            elif instance not in self._foreign or (changed and isinstance(record, DNSText)):
                self._resolve(instance)

    def _resolve(self, instance: str) -> None:
        if instance in self._resolving or self._azc is None:
            return
        task = self._spawn(self._resolve_one(instance))
        self._resolving[instance] = task
        task.add_done_callback(lambda t: self._resolving.pop(instance, None)
                               if self._resolving.get(instance) is t else None)

    async def _resolve_one(self, instance: str) -> None:
        info = AsyncServiceInfo(SERVICE_TYPE, instance)
        if not await info.async_request(self._azc.zeroconf, self._resolve_timeout_ms):
            _log.debug("[%s] could not resolve %s", self._node_id, instance)
            return
        props = {k.decode(errors="replace"): v.decode(errors="replace")
                 for k, v in info.properties.items() if v is not None}
        node_id = props.get("nid")
        if props.get("cfp") != self._fingerprint or not node_id or node_id == self._node_id:
            self._foreign.add(instance)
            if self._known.pop(instance, None) is not None:
                self._notify()
            return
        self._foreign.discard(instance)
        peer = Peer(node_id=node_id, addresses=tuple(info.parsed_addresses(self._ip_version)),
                    port=info.port or 0, api_port=_int(props.get("api")), name=props.get("name"),
                    protocol=_int(props.get("pv")), last_seen=self._loop.time())
        if instance not in self._known:
            _log.info("[%s] found peer %s at %s", self._node_id, node_id, ", ".join(peer.addresses))
        self._known[instance] = peer
        if info.server_key:
            self._servers[info.server_key] = instance
        self._notify()

    def _forget(self, instance: str, why: str) -> None:
        task = self._resolving.pop(instance, None)
        if task is not None:
            task.cancel()
        self._foreign.discard(instance)
        peer = self._known.pop(instance, None)
        if peer is None:
            return
        self._servers = {k: v for k, v in self._servers.items() if v != instance}
        _log.info("[%s] lost peer %s: %s", self._node_id, peer.node_id, why)
        self._notify()

    # -- asking and expiring -------------------------------------------------------------

    async def _ask_periodically(self) -> None:
        while True:
            out = DNSOutgoing(_FLAGS_QUERY)
            out.add_question(DNSQuestion(SERVICE_TYPE, _TYPE_PTR, _CLASS_IN))
            self._azc.zeroconf.async_send(out)
            await asyncio.sleep(self._query_interval * random.uniform(0.8, 1.0))
            horizon = self._loop.time() - self._expire_after
            for instance, peer in list(self._known.items()):
                if peer.last_seen is not None and peer.last_seen < horizon:
                    self._forget(instance, f"not heard from for {self._expire_after:g}s")

    # -- plumbing ------------------------------------------------------------------------

    def _notify(self) -> None:
        view = self.snapshot()
        significant = tuple(replace(p, last_seen=None) for p in view)
        if significant == self._last_view:
            return
        self._last_view = significant
        if self._on_change is not None:
            try:
                self._on_change(view)
            except Exception:
                _log.exception("[%s] discovery on_change callback failed", self._node_id)

    def _spawn(self, coro) -> asyncio.Task:
        return self._own(self._loop.create_task(coro))

    def _own(self, task: asyncio.Future) -> asyncio.Future:
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Future) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("[%s] discovery task failed", self._node_id, exc_info=task.exception())


class _Listener(RecordUpdateListener):
    """Hands every arriving record to its :class:`Discovery` (called in the event loop)."""

    def __init__(self, owner: Discovery) -> None:
        self._owner = owner

    def async_update_records(self, zc: Zeroconf, now: float, records: list[RecordUpdate]) -> None:
        try:
            self._owner._on_records(now, records)
        except Exception:
            _log.exception("[%s] discovery could not handle mDNS records", self._owner.node_id)

    def async_update_records_complete(self) -> None:
        pass


def _default_addresses(interfaces: list[str] | None) -> list[str]:
    if interfaces is not None:
        return list(interfaces)
    return [ip.ip for adapter in ifaddr.get_adapters() for ip in adapter.ips
            if isinstance(ip.ip, str) and not ip.ip.startswith("127.")]


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


# -- a debugging aid: python -m floydd.cluster.net.discovery (the tool is discovery_watch) --------

if __name__ == "__main__":
    from floydd.cluster.net.discovery_watch import main
    sys.exit(main())
