"""``/v1/info`` and ``/v1/nodes``: this daemon and the machines it schedules on."""

from __future__ import annotations

import os
import time

from aiohttp import web

from floydd.api.request import reply
from floydd.scheduler import storehealth
from floydd.cluster.roster import node_health_word

import floydd
from floydd.api import keys
from floydd.api.params import query_stale

routes = web.RouteTableDef()


@routes.get("/v1/info")
async def info(request: web.Request) -> web.Response:
    config = request.app[keys.CONFIG]
    jobs = request.app[keys.JOBS]
    return reply({
        "version": floydd.__version__, "node": config.node_name, "pid": os.getpid(),
        "state_dir": str(config.state_dir), "socket": str(config.socket_path),
        "log": config.log_where, "started": request.app[keys.STARTED],
        "uptime": time.time() - request.app[keys.STARTED], "sandbox": jobs.runtime.sandbox_mode,
        "sandbox_policy": jobs.runtime.sandboxing.policy, "sandbox_warning": jobs.runtime.sandboxing.warning,
        "running": len(jobs.runtime.running()), **_cluster_info(request.app[keys.CLUSTER]),
    })


def _cluster_info(service) -> dict:
    roles = {m["id"]: m for m in service.members()}
    me = roles.get(service.node_id, {})
    return {"role": "leader" if service.is_leader else me.get("role", "none"), "cluster_size": len(roles),
            "cluster": service.node_id, "leader": service.leader_id,
            "audit_warnings": service.audit_guard.warnings()}


@routes.get("/v1/nodes")
async def nodes(request: web.Request) -> web.Response:
    """Every node of the cluster with its resources and which job holds each GPU (``stale=1``
    reads this node's copy of the state); this node's entry is its own latest sample."""
    config = request.app[keys.CONFIG]
    state = request.app[keys.INVENTORY]
    info = state.latest or await state.refresh()
    service = request.app[keys.CLUSTER]
    stale = query_stale(request.query)
    roles = {m["id"]: ("leader" if m["leader"] else m["role"]) for m in service.members()}
    listing = []
    for node in await service.nodes(stale=stale):
        mine = node["id"] == service.node_id
        entry = info.to_dict() if mine else _remote(node)
        entry.update(id=node["id"], name=node.get("name") or node["id"], role=roles.get(node["id"], "none"),
                     health=storehealth.health_word(node_health_word(node.get("health", node.get("status"))), node),
                     store_why=storehealth.why(node),
                     address=node.get("address") or (str(config.socket_path) if mine else ""),
                     **service.clocks.view(node["id"]))     # its clock against the leader's (issue 21)
        held = service.state.held_gpus(node["id"])   # placements of the whole cluster
        for gpu in entry["gpus"]:
            gpu["job"] = held.get(gpu["index"])
            job = service.state.jobs.get(gpu["job"]) if gpu["job"] else None
            gpu["user"] = job.user or None if job is not None else None
        listing.append(entry)
    return reply(listing)




def _remote(node: dict) -> dict:
    """What the cluster knows of another node: its last heartbeat's inventory."""
    usage = dict(node.get("usage") or {})
    usage.pop("store", None)                # said as health and store_why
    resources = node.get("resources") or {}
    usage.setdefault("cpus", resources.get("cpus", 0))
    usage.setdefault("cpu_percent", 0.0)
    usage.setdefault("memory_total", resources.get("memory", 0))
    usage.setdefault("memory_available", 0)
    usage.setdefault("disk_total", 0)
    usage.setdefault("disk_free", 0)
    usage.setdefault("gpu_source", "unknown")
    usage.setdefault("gpus", [{"index": i, "name": name, "uuid": "", "memory_total": 0, "memory_used": 0,
                               "utilization": None, "temperature": None, "power_w": None, "fake": False}
                              for i, name in zip(resources.get("gpus", []), resources.get("gpu_names", []))])
    for gpu in usage["gpus"]:
        gpu.setdefault("job", None)
    return usage
