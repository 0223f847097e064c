"""``/v1/info`` and ``/v1/nodes``: this daemon and the machines it schedules on."""

from __future__ import annotations

import os
import time

from aiohttp import web

from floydd.api.request import reply

import floydd
from floydd.api import keys

routes = web.RouteTableDef()


@routes.get("/v1/info")
async def info(request: web.Request) -> web.Response:
    config = request.app[keys.CONFIG]
    jobs = request.app[keys.JOBS]
    return reply({
        "version": floydd.__version__, "node": config.node_name, "pid": os.getpid(),
        "state_dir": str(config.state_dir), "socket": str(config.socket_path),
        "log": str(config.log_path), "started": request.app[keys.STARTED],
        "uptime": time.time() - request.app[keys.STARTED], "sandbox": jobs.runtime.sandbox_mode,
        "running": len(jobs.runtime.running()), "role": "leader", "cluster_size": 1,
    })


@routes.get("/v1/nodes")
async def nodes(request: web.Request) -> web.Response:
    config = request.app[keys.CONFIG]
    state = request.app[keys.INVENTORY]
    info = state.latest or await state.refresh()
    held = {}
    for (project, number), gpus in request.app[keys.JOBS].runtime.running().items():
        for g in gpus:
            held[g] = f"{project}/{number}"
    node = info.to_dict()
    for gpu in node["gpus"]:
        gpu["job"] = held.get(gpu["index"])
    node.update(name=config.node_name, role="leader", health="healthy", address=str(config.socket_path))
    return reply([node])
