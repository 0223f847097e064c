"""``create_app(config)``: the one factory used by ``floydd start``, tests and dev mode.

Each long-lived service is a ``cleanup_ctx`` (opened in order, closed in reverse);
handlers are thin and map :class:`FloyddError` to JSON errors at the edge.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
import time

from aiohttp import web

from floydd import log
from floydd.api import cluster, datasets, jobs, keys, nodes, openapi
from floydd.config import Config
from floydd.daemon.cluster import cluster_ctx
from floydd.daemon.inventory import InventoryState
from floydd.errors import FloyddError, InternalError, Unauthorized, UserError
from floydd.cluster.peerstore import fetch_tree
from floydd.jobs.cluster import ClusterJobService
from floydd.jobs.service import JobService
from floydd.node import Inventory
from floydd.records import Records
from floydd.runtime import NodeRuntime
from floydd.store import Store

__all__ = ["create_app"]


def create_app(config: Config) -> web.Application:
    app = web.Application(middlewares=[error_middleware, auth_middleware], client_max_size=16 * 1024 * 1024)
    app[keys.CONFIG] = config
    app[keys.STARTED] = time.time()
    app.cleanup_ctx.extend([_records_ctx, _store_ctx, _inventory_ctx, cluster_ctx, _jobs_ctx])
    for module in (nodes, jobs, datasets, cluster, openapi):
        app.router.add_routes(module.routes)
    return app


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except FloyddError as exc:
        return web.json_response(exc.to_payload(), status=exc.status)
    except json.JSONDecodeError as exc:
        err = UserError(f"request body is not valid JSON: {exc}", hint="send a JSON object")
        return web.json_response(err.to_payload(), status=400)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        err = FloyddError(exc.reason or f"HTTP {exc.status}", code=f"http_{exc.status}",
                          hint="see /v1/openapi.json for the API")
        return web.json_response(err.to_payload(), status=exc.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:
        log.api.exception("unhandled error in %s %s", request.method, request.path)
        config = request.app[keys.CONFIG]
        err = InternalError(f"internal error: {type(exc).__name__}: {exc}",
                            hint=f"this is a bug; the daemon log {config.log_path} has the details")
        return web.json_response(err.to_payload(), status=500)


@web.middleware
async def auth_middleware(request: web.Request, handler):
    """The unix socket is guarded by file permissions; TCP callers need the API token."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        token = request.app.get(keys.TCP_TOKEN)
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not token or not hmac.compare_digest(sent.encode(), token.encode()):
            raise Unauthorized("a valid API token is required on TCP",
                               hint="send 'Authorization: Bearer TOKEN' (set FLOYD_TOKEN for the CLI); "
                                    "the token is in the daemon's state dir, file api-token")
    return await handler(request)


async def _records_ctx(app: web.Application):
    config = app[keys.CONFIG]
    config.state_dir.mkdir(parents=True, exist_ok=True)
    records = await asyncio.to_thread(Records, config.records_path)
    app[keys.RECORDS] = records
    yield
    await asyncio.to_thread(records.close)


async def _store_ctx(app: web.Application):
    config = app[keys.CONFIG]
    app[keys.STORE] = await asyncio.to_thread(Store.open, config.store_dir)
    yield
    close = getattr(app[keys.STORE], "close", None)
    if close:
        await asyncio.to_thread(close)


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
    service: JobService | None = None

    def on_finished(project: str, number: int) -> None:
        if service is not None:
            service.on_finished(project, number)

    runtime = NodeRuntime(state_dir=config.state_dir, store=app[keys.STORE], records=app[keys.RECORDS],
                          sandbox=config.sandbox, sample_interval=config.sample_interval,
                          tail_interval=config.tail_interval, stop_grace=config.stop_grace,
                          on_finished=on_finished)
    common = dict(config=config, records=app[keys.RECORDS], store=app[keys.STORE], runtime=runtime,
                  inventory_state=app[keys.INVENTORY])
    if app[keys.CLUSTER] is None:
        service = JobService(**common)
    else:
        service = ClusterJobService(cluster=app[keys.CLUSTER], datasets=app[keys.CLUSTER_DATASETS],
                                    fetch_tree=fetch_tree, lost_after=config.job_lost_after, **common)
    app[keys.JOBS] = service
    await service.start()
    yield
    await service.close()
    await runtime.close()
