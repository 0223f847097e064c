"""This node's node-to-node listener: who may speak to it, and the mTLS app that serves them.

A part of :class:`~floydd.cluster.service.ClusterService` (:class:`PeerListener`, its
``listener``). Every node-to-node request passes :func:`floydd.security.tls.require_peer_cert`
with :meth:`PeerListener.standing`: ``member``, ``joining`` (may only announce itself) or
refused, from the replicated state's node table and certificates
(:func:`floydd.cluster.state.authz.standing`) and the raft configuration the driver knows.
"""

from __future__ import annotations

from aiohttp import web

from floydd.cluster.driver.loop import RaftDriver
from floydd.cluster.net.addressbook import join_host_port
from floydd.cluster.net.transport import Transport
from floydd.cluster.net.wire import protocol_middleware
from floydd.cluster.state.authz import standing
from floydd.cluster.state.machine import ClusterState
from floydd.security.identity import NodeIdentity
from floydd.security.tls import require_peer_cert, server_context

__all__ = ["PeerListener"]


class PeerListener:
    """Serves ``transport``'s routes with mTLS as ``identity``, to the peers ``state`` and
    ``driver`` say are members (or joining)."""

    def __init__(self, identity: NodeIdentity, *, driver: RaftDriver, state: ClusterState,
                 transport: Transport) -> None:
        self._identity, self._driver, self._state, self._transport = identity, driver, state, transport
        self._runner: web.AppRunner | None = None

    def is_member_cert(self, node_id: str) -> bool:
        """Whether ``node_id`` is a member now: in the node table or the raft configuration,
        not removed."""
        return node_id not in self._state.removed and (node_id in self._state.nodes or self._driver.in_conf(node_id))

    def standing(self, node_id: str, serial: str) -> str | None:
        """For ``require_peer_cert(standing=...)``, on every node-to-node request: ``member``,
        ``joining`` (may only announce itself) or None (refused). Set lookups only.

        A node in no configuration yet (a box that has just joined, before the leader's first
        entries or snapshot reach it) knows no members: it takes whom the cluster's CA vouches
        for, as a raft learner must; it holds nothing of the cluster to give away yet."""
        if not self._driver.running:
            return None                 # not started yet (or stopped): nothing to serve anyone
        if not self._driver.in_conf(None):
            return "member"
        return standing(self._state, _Conf(self._driver), node_id, serial)

    def create_app(self) -> web.Application:
        """The node-to-node app: ``/cluster/v1/raft``, ``/propose``, ``/read``, ``/snapshot``
        behind the protocol check and the peer certificate check."""
        app = web.Application(middlewares=[protocol_middleware, require_peer_cert(standing=self.standing)],
                              client_max_size=64 << 20)     # raft batches; snapshots stream, uncapped
        app.add_routes(self._transport.routes())
        app.on_shutdown.append(self._close_streams)     # else each open raft stream holds the stop
        return app

    async def _close_streams(self, _app: web.Application) -> None:
        await self._transport.inbound.close_streams()

    async def listen(self, host: str = "127.0.0.1", port: int = 0, *, advertise_host: str | None = None,
                     app: web.Application | None = None) -> str:
        """Serve ``app`` (default :meth:`create_app`) with mTLS on ``host:port`` (dev mode and
        tests; the daemon serves :func:`floydd.daemon.peers.peer_app` on its own listener).
        Returns and advertises ``host:port``."""
        self._runner = web.AppRunner(app or self.create_app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=server_context(self._identity))
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]
        address = join_host_port(advertise_host or host, bound)
        self._transport.advertise = address
        return address

    async def close(self) -> None:
        """Stop serving (if :meth:`listen` did)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class _Conf:
    """The raft configuration's members, as :func:`floydd.cluster.state.authz.standing` asks: ``in``."""

    __slots__ = ("_driver",)

    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, str) and self._driver.in_conf(node_id)
