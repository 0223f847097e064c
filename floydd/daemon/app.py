"""``create_app(config)``: the daemon's composition root, used by ``floydd start``, tests and dev mode.

Each long-lived service is a ``cleanup_ctx`` context (opened in this order, closed in
reverse), handed to the routes through :mod:`floydd.api.keys`::

    records     first the start-up checks (:mod:`floydd.daemon.integrity`: a records file, catalog
                or raft log that cannot be trusted stops the daemon here, named), then
                records.db: this node's job records, metrics, events
    store       the encrypted store and its local catalog
    inventory   psutil + NVML samples of this node
    control     the control plane (always: a lone box is a cluster of one), the cluster's
                dataset catalog, and with ``floydd init/join`` the mTLS listener and discovery
                (:mod:`floydd.daemon.control`)
    jobs        the runtime and the job service: the one road every job takes

The routes themselves live in :mod:`floydd.api` (``/v1``) and :mod:`floydd.daemon.peers`
(the node-to-node ``/cluster/v1`` on the mTLS listener).
"""

from __future__ import annotations

import asyncio
import threading
import time

from aiohttp import web

from floydd import log
from floydd.api import keys, routes
from floydd.api.boxtrust import trust_header
from floydd.api.middleware import auth_middleware, error_middleware
from floydd.api.throttle import install as install_throttle
from floydd.cluster.replication.peerstore import fetch_tree
from floydd.config import Config
from floydd.daemon import integrity
from floydd.daemon.control import control_ctx
from floydd.daemon.inventory import InventoryState
from floydd.jobs.service import JobService
from floydd.node import Inventory
from floydd.records import Records
from floydd.runtime import NodeRuntime
from floydd.runtime.buildbox import BuildPolicy
from floydd.runtime.sandboxing import serves_others
from floydd.system import job_account
from floydd.store import Store
from floydd.errors import FloyddError
from floydd.store.keys.rekey import Stopped, finish_rekey, plan_rekey, rekey, rekey_pending

__all__ = ["create_app"]


def create_app(config: Config) -> web.Application:
    app = web.Application(middlewares=[error_middleware, auth_middleware], client_max_size=16 * 1024 * 1024)
    app[keys.CONFIG] = config
    app[keys.STARTED] = time.time()
    app.cleanup_ctx.extend([_records_ctx, _store_ctx, _inventory_ctx, control_ctx, _jobs_ctx])
    app.router.add_routes(routes())
    install_throttle(app, config)                      # failed tokens on the TLS API, per source
    app.on_response_prepare.append(trust_header)       # what laptops' pins learn of the lab
    return app


async def _records_ctx(app: web.Application):
    config = app[keys.CONFIG]
    config.state_dir.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(integrity.check_state, config)    # records, store and raft log: before any opens
    records = await asyncio.to_thread(Records, config.records_path)
    app[keys.RECORDS] = records
    yield
    await asyncio.to_thread(records.close)


async def _store_ctx(app: web.Application):
    config = app[keys.CONFIG]
    app[keys.STORE_READY] = ready = asyncio.Event()
    pending = await asyncio.to_thread(rekey_pending, config.store_dir)
    if pending:                 # planned before the store opens: it reads the root trees only
        pending = await asyncio.to_thread(plan_rekey, config.store_dir)
    app[keys.STORE] = store = await asyncio.to_thread(Store.open, config.store_dir, during_rekey=pending,
                                                      direct_io=config.store_direct_io)
    stop = threading.Event()
    task = None
    if pending:
        task = asyncio.create_task(_reseal(config, app[keys.RECORDS], store, ready, stop), name="floydd.reseal")
    else:
        ready.set()
    yield
    stop.set()
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)      # ends between two batches
    await asyncio.to_thread(store.close)


async def _reseal(config: Config, records: Records, store: Store, ready: asyncio.Event,
                  stop: threading.Event, *, retry: float = 60.0) -> None:
    """This box joined a cluster: re-seal its old objects under the cluster's secret in the
    background while it serves (or go on after a stop or a crash), then rename the trees its
    job records name; ``ready`` once done (its datasets then enter the cluster's catalog). A
    damaged object or a full disk leaves it pending, said in the log, tried again each
    ``retry`` seconds and at each start."""
    log.daemon.warning("re-sealing the store %s under the cluster's secret in the background (new data is "
                       "sealed under it already; this box's older datasets join the cluster's catalog once it "
                       "is done; a stop or a crash resumes where it was)", config.store_dir)
    last = [0.0]
    pace = _Pace(config.store_reseal_rate * 1e6, stop)

    def progress(p) -> None:
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            log.daemon.info("re-sealing (%s): %d of %d objects", p.phase, p.objects_done, p.objects_total)
        if p.phase == "copy":
            pace.after(p.bytes_done)
    while not stop.is_set():
        try:
            trees = await asyncio.to_thread(rekey, config.store_dir, progress=progress, online=True,
                                            should_stop=stop.is_set, timeout=600.0)
            changed = await asyncio.to_thread(records.remap_trees, trees)
            await asyncio.to_thread(finish_rekey, config.store_dir)
        except Stopped:
            log.daemon.info("re-sealing stopped with the daemon; the next start resumes it")
            return
        except FloyddError as exc:
            log.daemon.error("re-sealing the store under the cluster's secret: %s (%s); trying again in %.0f s",
                             exc.message, exc.hint, retry)
            await asyncio.sleep(retry)
            continue
        store.rekey_finished()
        ready.set()
        log.daemon.warning("store re-sealed: %d trees renamed, %d job records updated", len(trees), changed)
        return


class _Pace:
    """Keeps the join's re-seal at ``rate`` bytes a second on average (``store_reseal_rate``,
    as the epoch re-seal): called after each durable batch with the bytes done so far, it
    sleeps in the re-seal's thread until the batch's share of time is spent, a tenth of a
    second at a time so a stop is heard. ``rate`` 0: unpaced (this re-seal cannot be left
    undone: the box's older datasets join the catalog once it ends)."""

    def __init__(self, rate: float, stop: threading.Event) -> None:
        self.rate, self.stop = rate, stop
        self.start: tuple[float, int] | None = None

    def after(self, done: int) -> None:
        if self.rate <= 0:
            return
        if self.start is None or done < self.start[1]:      # the first call, or a new pass over the journal
            self.start = (time.monotonic(), done)
            return
        until = self.start[0] + (done - self.start[1]) / self.rate
        while not self.stop.is_set() and (left := until - time.monotonic()) > 0:
            self.stop.wait(min(0.1, left))


async def _inventory_ctx(app: web.Application):
    config = app[keys.CONFIG]
    inventory = Inventory(disk_path=config.state_dir, fake_gpus=config.dev_fake_gpus or None)
    state = InventoryState(inventory, config.inventory_interval)
    await state.start()
    app[keys.INVENTORY] = state
    yield
    await state.close()


async def _jobs_ctx(app: web.Application):
    config = app[keys.CONFIG]
    cluster = app[keys.CLUSTER]
    service: JobService | None = None

    def on_finished(project: str, number: int) -> None:
        if service is not None:
            service.on_finished(project, number)

    def on_recorded(project: str, number: int) -> None:
        if service is not None:       # an ended job's log is recorded to its end: its final metrics
            service.reconciler.summary_caught_up(project, number)

    runtime = NodeRuntime(state_dir=config.state_dir, store=app[keys.STORE], records=app[keys.RECORDS],
                          sandbox=config.sandbox, serves_others=serves_others(config),
                          builds=BuildPolicy(network=config.build_network, wheelhouse=config.wheelhouse),
                          env_pass=config.job_env_pass, sample_interval=config.sample_interval,
                          tail_interval=config.tail_interval, stop_grace=config.stop_grace,
                          on_finished=on_finished, job_user=job_account(config.job_user) if config.system else None,
                          on_recorded=on_recorded, max_metric_points=config.max_metric_points,
                          max_log_bytes=int(config.max_log_mb * 2**20) or None,
                          spare_idle=config.agent_spare_idle)

    async def fetch(store, tree: str, sources: list[str]):
        return await fetch_tree(store, tree, sources, cluster)

    service = JobService(config=config, cluster=cluster, datasets=app[keys.DATASETS], records=app[keys.RECORDS],
                         store=app[keys.STORE], runtime=runtime, fetch_tree=fetch,
                         lost_after=config.job_lost_after)
    app[keys.JOBS] = service
    await service.start()
    yield
    await service.close()
    await runtime.close()
