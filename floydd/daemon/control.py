"""The control plane inside the daemon: one ``cleanup_ctx`` around :class:`ClusterService`.

Always there: a box alone is a one-voter cluster whose log is ``STATE/cluster/raft.db``;
it leads at once and nothing listens beyond loopback. With ``STATE/cluster.json``
(written by ``floydd init`` or ``floydd join``) the node also serves the node-to-node API
with mutual TLS on ``listen`` (:mod:`floydd.daemon.peers`), announces itself with zeroconf
and feeds discovered peers to the transport; and it names where :mod:`floydd.daemon.main`
serves ``/v1`` over TLS for people elsewhere (``api_listen``, :data:`keys.REMOTE_API`).
``pending`` in that file says what to do once on this start (found, join, recover). A clean
stop hands over leadership and leaves the voters first (``ClusterService.close``). What only a
member runs (the mTLS app, joins, renewals, discovery) is imported when the box is one: a box
alone loads neither it nor the ``cryptography`` it brings (issue 23).

The cluster's dataset catalog (:class:`~floydd.cluster.replication.datasets.ClusterDatasets`) starts
here too: on the first start of a box (or after it joined another cluster) the versions
of its own store enter the catalog. So does the care of the store
(:class:`~floydd.cluster.replication.storecare.StoreCare`): reads that meet a damaged object repair it
from another box, and the background scrub (``store_scrub_rate``) re-checks every object.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from dataclasses import replace
from functools import partial

from aiohttp import web

from floydd import log
from floydd.api import keys
from floydd.cluster.state.access import ReadRules
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG
from floydd.cluster.replication.datasets import ClusterDatasets
from floydd.cluster.service import ClusterService
from floydd.cluster.replication.storecare import StoreCare
from floydd.config import settings_line
from floydd.daemon.cluster_files import (ClusterSettings, api_address, guess_address, read_settings, split_address,
                                         write_settings)
from floydd.daemon.ports import start_site
from floydd.errors import FloyddError, UserError
from floydd.runtime import fence
from floydd.runtime.disk import RESERVE_NAME, StoreWatch
from floydd.security.identity import NodeIdentity
from floydd.security.tls import api_server_context, server_context
from floydd.daemon.epochs import StoreEpochs
from floydd.store.keys.rekey import cluster_secret
from floydd.store.keys.epochs import epoch_secret

if TYPE_CHECKING:
    from floydd.cluster.net.discovery import Discovery
    from floydd.daemon.joining import Trust

__all__ = ["control_ctx"]


async def control_ctx(app: web.Application):
    config = app[keys.CONFIG]
    settings = await asyncio.to_thread(read_settings, config.state_dir)
    identity = await asyncio.to_thread(NodeIdentity.load_or_create, config.state_dir / "tls")
    inventory = app[keys.INVENTORY]
    info = inventory.latest
    resources = {"cpus": info.cpus, "memory": info.memory_total, "gpus": [g.index for g in info.gpus],
                 "gpu_names": [g.name for g in info.gpus]} if info else {}

    store_watch = StoreWatch([config.store_dir, config.state_dir],    # full or failing: no copies nor jobs here
                             reserve=config.state_dir / RESERVE_NAME)
    await asyncio.to_thread(store_watch.poll)

    def usage() -> dict:  # sent with each heartbeat: what `floyd nodes` shows on every node
        return {**(inventory.latest.to_dict() if inventory.latest else {}), "store": store_watch.report()}
    timing = replace(DEFAULT_CLUSTER_CONFIG, heartbeat_interval=config.cluster_heartbeat,
                     stale_after=4 * config.cluster_heartbeat, suspect_after=config.node_suspect_after,
                     max_clock_skew=config.max_clock_skew,
                     archive_after=config.archive_after, archive_keep=config.archive_keep,
                     snapshot_every=config.raft_snapshot_every,
                     archive_interval=min(10.0, max(0.5, config.archive_after / 4)))
    advertise = ""
    if settings is not None:
        _host, port = split_address(settings.listen)
        advertise = settings.advertise or f"{guess_address()}:{port}"
    service = ClusterService(identity, config.state_dir / "cluster", name=config.node_name, advertise=advertise,
                             resources=resources, usage=usage, config=timing,
                             live=partial(fence.live_runs, config.state_dir),   # its runs, with each heartbeat
                             settings=settings_line(config))                    # audited when they change
    trust = keeper = listener = None
    if settings is not None:      # a member of a cluster of boxes: joins, the CA key, renewals
        from floydd.daemon.joining import Trust
        secret = config.store_dir / "key"
        trust = Trust(service, identity, config.state_dir, store_secret=lambda: cluster_secret(secret.parent),
                      validity=config.cert_validity, joins_per_minute=config.join_attempts_per_minute,
                      epoch_secret=partial(epoch_secret, app[keys.STORE].root))
        listener = await _listen(app, service, identity, settings, trust)
        remote = api_address(settings)
        if remote is not None:    # the daemon's main serves /v1 there too, once it is set up
            app[keys.REMOTE_API] = (*remote, api_server_context(identity))
    app[keys.TOKENS] = trust.tokens if trust is not None else None
    pending = settings.pending if settings is not None else ""
    await service.start(bootstrap=settings is None or pending == "bootstrap", join=settings.join if settings else (),
                        rejoin=pending == "join", recover=pending == "recover")
    datasets = ClusterDatasets(service, app[keys.STORE], state=service.state,
                               grace=config.replica_grace,
                               copy_wait=config.dataset_copy_wait,
                               import_marker=config.state_dir / "cluster" / "imported-datasets",
                               rules=ReadRules.of(config),          # who reads job outputs through this box
                               store_watch=store_watch)
    datasets.start()
    care = StoreCare(datasets, scrub_rate=config.store_scrub_rate * 1e6, scrub_every=config.store_scrub_every)
    care.start()
    import_task = asyncio.create_task(_when_ready(app[keys.STORE_READY], datasets.import_local),
                                      name="floydd.datasets.import")
    if trust is not None:
        from floydd.daemon.renewal import TrustKeeper
        keeper = TrustKeeper(trust, renew_before=config.cert_renew_before)
        keeper.start()
    epochs = StoreEpochs(service, app[keys.STORE], app[keys.STORE].root, rate=config.store_reseal_rate * 1e6,
                         check_every=config.store_epoch_check, ask=keeper.ask if keeper is not None else None)
    epochs.start()                  # store key epochs: keys from members, the background re-seal
    app[keys.EPOCHS] = epochs
    if pending == "bootstrap" and settings is not None and settings.admin:
        try:                    # who ran floydd init: the first admin (floydd.cluster.state.authz)
            await service.grant_admin(settings.admin)
        except FloyddError as exc:
            log.cluster.warning("recording %s as the cluster's admin: %s", settings.admin, exc)
    if pending == "recover":
        log.cluster.warning("RECOVERED: this node now forms a new single-node cluster on its own; every "
                            "other node must join it again with a new token")
    if pending:
        settings.pending = ""
        await asyncio.to_thread(write_settings, config.state_dir, settings)
    discovery = await _discover(service, identity, settings) if settings and settings.discovery else None
    app[keys.CLUSTER] = service
    app[keys.DATASETS] = datasets
    yield
    await service.say_off()         # first: the leader judges this box's jobs from its clean stop
    await epochs.close()
    if keeper is not None:
        await keeper.close()
    if discovery is not None:
        await discovery.close()
    import_task.cancel()
    await asyncio.gather(import_task, return_exceptions=True)
    await care.close()
    await datasets.close()
    await service.close(leave=True)
    if listener is not None:
        await listener.cleanup()


async def _when_ready(ready: asyncio.Event, then) -> None:
    """``then()`` once the store holds no tree of an older secret (an online re-seal ended):
    this box's datasets enter the cluster's catalog with the ids the cluster's secret gives."""
    await ready.wait()
    await then()


async def _listen(app: web.Application, service: ClusterService, identity: NodeIdentity,
                  settings: ClusterSettings, trust: Trust) -> web.AppRunner:
    """The node-to-node API with mutual TLS on ``settings.listen``."""
    from floydd.daemon.peers import peer_app
    host, port = split_address(settings.listen)
    mtls = peer_app(service, store=app[keys.STORE], jobs=lambda: app.get(keys.JOBS), trust=trust)
    runner = web.AppRunner(mtls, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await start_site(web.TCPSite(runner, host, port, ssl_context=server_context(identity)),
                         setting="listen", host=host, port=port,
                         set_in=str(app[keys.CONFIG].state_dir / "cluster.json"))
    except UserError:
        await runner.cleanup()
        raise
    log.cluster.info("cluster %s: node %s listening on %s:%d, advertised as %s", settings.name,
                     identity.node_id, host, port, service.advertise)
    return runner


async def _discover(service: ClusterService, identity: NodeIdentity, settings: ClusterSettings) -> Discovery | None:
    from floydd.cluster.net.discovery import Discovery  # zeroconf (~12 MiB): only a box with peers to find
    adv_host, _ = split_address(service.advertise)
    _, port = split_address(settings.listen)

    def on_change(peers) -> None:
        for peer in peers:
            if peer.node_id and peer.addresses:
                service.learn_address(peer.node_id, f"{peer.addresses[0]}:{peer.port}")
    discovery = Discovery(fingerprint=identity.cluster_fingerprint, node_id=identity.node_id, port=port,
                          name=service.name, addresses=[adv_host], seeds=settings.seeds, on_change=on_change)
    try:
        await discovery.start()
    except Exception as exc:  # discovery is a convenience: static seeds and the log still work
        log.cluster.warning("zeroconf discovery unavailable: %s", exc)
        return None
    return discovery
