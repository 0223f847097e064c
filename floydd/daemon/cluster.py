"""The control plane inside the daemon: one ``cleanup_ctx`` around :class:`ClusterService`.

On a node with ``STATE/cluster.json`` (after ``floydd init`` or ``floydd join``) the
daemon also serves the node-to-node API with mutual TLS on ``listen`` (the join
routes too where the cluster CA lives), announces itself with zeroconf and feeds
discovered peers to the transport. Without it the node is a single box and
nothing listens beyond loopback. A clean stop hands over leadership and leaves
the voters first (``ClusterService.close``).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from aiohttp import web

from floydd import log
from floydd.api import keys
from floydd.cluster.datasets import ClusterDatasets
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG
from floydd.cluster.discovery import Discovery
from floydd.jobs.peer import peer_routes
from floydd.cluster.peerstore import store_routes
from floydd.cluster.service import ClusterService
from floydd.daemon.cluster_files import guess_address, read_settings, split_address, \
    write_settings
from floydd.security.ca import ClusterCA
from floydd.security.identity import NodeIdentity
from floydd.security.join import join_routes
from floydd.security.tls import server_context
from floydd.security.tokens import TokenStore
from floydd.store.crypto import load_or_create_secret

__all__ = ["cluster_ctx", "token_store"]


def token_store(state_dir, ca: ClusterCA) -> TokenStore:
    return TokenStore(state_dir / "ca" / "tokens.db", ca_fingerprint=ca.fingerprint)


async def cluster_ctx(app: web.Application):
    config = app[keys.CONFIG]
    settings = await asyncio.to_thread(read_settings, config.state_dir)
    if settings is None:
        app[keys.CLUSTER] = None
        app[keys.CLUSTER_DATASETS] = None
        yield
        return
    identity = await asyncio.to_thread(NodeIdentity.load, config.state_dir / "tls")
    host, port = split_address(settings.listen)
    advertise = settings.advertise or f"{guess_address()}:{port}"
    info = app[keys.INVENTORY].latest
    resources = {"cpus": info.cpus, "memory": info.memory_total, "gpus": [g.index for g in info.gpus],
                 "gpu_names": [g.name for g in info.gpus]} if info else {}
    inventory = app[keys.INVENTORY]

    def usage() -> dict:  # sent with each heartbeat: what `floyd nodes` shows on every node
        return inventory.latest.to_dict() if inventory.latest else {}
    timing = replace(DEFAULT_CLUSTER_CONFIG, heartbeat_interval=config.cluster_heartbeat,
                     stale_after=4 * config.cluster_heartbeat)
    service = ClusterService(identity, config.state_dir / "cluster", name=config.node_name,
                             advertise=advertise, resources=resources, usage=usage, config=timing)
    mtls = service.create_app()
    ca_dir = config.state_dir / "ca"
    if (ca_dir / "ca.key").exists():
        ca = await asyncio.to_thread(ClusterCA.load, ca_dir)
        secret_path = config.store_dir / "key"
        mtls.add_routes(join_routes(ca, token_store(config.state_dir, ca),
                                    store_secret_provider=lambda: load_or_create_secret(secret_path)))
    mtls.add_routes(store_routes(app[keys.STORE]))   # peers fetch sealed objects (same secret)
    mtls.add_routes(peer_routes(lambda: app.get(keys.JOBS)))  # logs, metrics, events of jobs run here
    runner = web.AppRunner(mtls, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=server_context(identity)).start()
    log.cluster.info("cluster %s: node %s listening on %s:%d, advertised as %s", settings.name,
                     identity.node_id, host, port, advertise)
    pending = settings.pending
    await service.start(bootstrap=pending == "bootstrap", join=settings.join, rejoin=pending == "join",
                        recover=pending == "recover")
    datasets = ClusterDatasets(service, app[keys.STORE],
                               import_marker=config.state_dir / "cluster" / "imported-datasets")
    datasets.start()
    import_task = asyncio.create_task(datasets.import_local(), name="floydd.datasets.import")
    app[keys.CLUSTER_DATASETS] = datasets
    if pending == "recover":
        log.cluster.warning("RECOVERED: this node now forms a new single-node cluster on its own; every "
                            "other node must join it again with a new token")
    if pending:
        settings.pending = ""
        await asyncio.to_thread(write_settings, config.state_dir, settings)
    discovery = None
    if settings.discovery:
        adv_host, _ = split_address(advertise)

        def on_change(peers) -> None:
            for peer in peers:
                if peer.node_id and peer.addresses:
                    service.transport.set_peer(peer.node_id, f"{peer.addresses[0]}:{peer.port}")
        discovery = Discovery(fingerprint=identity.cluster_fingerprint, node_id=identity.node_id, port=port,
                              name=config.node_name, addresses=[adv_host], seeds=settings.seeds,
                              on_change=on_change)
        try:
            await discovery.start()
        except Exception as exc:  # discovery is a convenience: static seeds and the log still work
            log.cluster.warning("zeroconf discovery unavailable: %s", exc)
            discovery = None
    app[keys.CLUSTER] = service
    yield
    if discovery is not None:
        await discovery.close()
    import_task.cancel()
    await asyncio.gather(import_task, return_exceptions=True)
    await datasets.close()
    await service.close(leave=True)
    await runner.cleanup()


