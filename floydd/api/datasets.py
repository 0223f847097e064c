"""``/v1/datasets`` and ``/v1/store``: versioned datasets over the encrypted store.

On a single box the versions are this store's catalog. In a cluster
(``app[keys.CLUSTER_DATASETS]``, a :class:`~floydd.cluster.datasets.ClusterDatasets`) they
are the cluster's: an upload is snapshotted here and registered in the cluster; list and
info read the cluster catalog (list shows each version's holders); clone first fetches what
this node lacks from the holders; delete goes through the cluster. Answers keep one shape
either way. ``/v1/store`` (verify, gc) is always this node's store.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

from aiohttp import web

from floydd.api import keys
from floydd.api.request import body, check_dest, ndjson, reply
from floydd.api.tarstream import received_folder, send_tree
from floydd.errors import UserError
from floydd.store.ids import ObjectId

routes = web.RouteTableDef()


@routes.get("/v1/datasets")
async def list_datasets(request: web.Request) -> web.Response:
    store = request.app[keys.STORE]
    cluster = _cluster(request)
    if cluster is not None:
        return reply(await cluster.list(request.query.get("name") or None))
    versions = await asyncio.to_thread(store.catalog.list, request.query.get("name") or None)
    return reply([v.to_dict() for v in versions])


@routes.get("/v1/datasets/info")
async def info(request: web.Request) -> web.Response:
    store = request.app[keys.STORE]
    ref = request.query.get("ref", "")
    if not ref:
        raise UserError("name a dataset", hint="floyd data info NAME[:VERSION]")
    cluster = _cluster(request)
    if cluster is not None:
        version = await cluster.resolve(ref)
        return reply(_describe(version, await cluster.manifest(version)))

    def describe() -> dict:
        version = store.catalog.resolve(ref)
        return _describe(version.to_dict(), store.read_tree(version.tree))
    return reply(await asyncio.to_thread(describe))


@routes.post("/v1/datasets")
async def upload(request: web.Request) -> web.StreamResponse:
    """Snapshot a folder on this machine into a new version; streams progress."""
    data = await body(request)
    return await _ingest(request, data.get("name"), data.get("path"), data.get("message") or "", data.get("idem_key"))


@routes.post("/v1/datasets/tar")
async def upload_tar(request: web.Request) -> web.StreamResponse:
    """The same from a folder sent as a tar (``?name=&message=``), for a client elsewhere."""
    name = request.query.get("name") or ""
    if name:                                    # a bad name is refused before the upload is read
        await asyncio.to_thread(request.app[keys.STORE].catalog.check_name, name)
    async with received_folder(request, what="the dataset") as (folder, _got):
        return await _ingest(request, name, str(folder), request.query.get("message") or "",
                             request.query.get("idem_key"))


@routes.get("/v1/datasets/tar")
async def clone_tar(request: web.Request) -> web.StreamResponse:
    """Version ``?ref=NAME[:N]`` as a tar (fetched from its holders first in a cluster)."""
    store, ref = request.app[keys.STORE], request.query.get("ref", "")
    cluster = _cluster(request)
    if cluster is None:
        version = await asyncio.to_thread(store.catalog.resolve, ref)
        return await send_tree(request, version.tree)
    found = await cluster.resolve(ref)
    loop = asyncio.get_running_loop()

    def fetch() -> None:
        asyncio.run_coroutine_threadsafe(cluster.ensure_local(found["tree"], found["holders"]), loop).result()
    return await send_tree(request, ObjectId.from_hex(found["tree"]), prepare=fetch)


async def _ingest(request: web.Request, name, path, message: str, idem_key) -> web.StreamResponse:
    store = request.app[keys.STORE]
    if not isinstance(name, str) or not name:
        raise UserError("name the dataset", hint="floyd data upload PATH --name NAME")
    if not isinstance(path, str) or not os.path.isabs(path):
        raise UserError("path must be an absolute path", hint="floyd data upload PATH --name NAME")
    if not os.path.exists(path):
        raise UserError(f"{path} does not exist", hint="check the path you gave to floyd data upload")
    if not os.path.isdir(path):
        raise UserError(f"{path} is not a folder", hint="put the file(s) in a folder and upload the folder")
    await asyncio.to_thread(store.catalog.check_name, name)
    cluster = _cluster(request)
    if cluster is not None:
        idem_key = idem_key if isinstance(idem_key, str) and idem_key else f"upload:{secrets.token_hex(16)}"

        def snapshot(progress):
            return store.snapshot_report(Path(path), progress=progress)

        async def register(result) -> dict:
            return {"result": await cluster.register(name, str(result.tree), size=result.size, files=result.files,
                                                     message=str(message), idem_key=idem_key)}
        return await ndjson(request, snapshot, register)

    def work(progress):
        return store.upload(Path(path), name, message=str(message), progress=progress)

    async def finish(version) -> dict:
        return {"result": version.to_dict()}
    return await ndjson(request, work, finish)


@routes.post("/v1/datasets/clone")
async def clone(request: web.Request) -> web.StreamResponse:
    store = request.app[keys.STORE]
    data = await body(request)
    dest = check_dest(data.get("dest"))
    cluster = _cluster(request)
    if cluster is not None:
        found = await cluster.resolve(str(data.get("ref", "")))
        loop = asyncio.get_running_loop()

        def fetch_and_restore(progress) -> None:
            pending = cluster.ensure_local(found["tree"], found["holders"], progress=progress)
            asyncio.run_coroutine_threadsafe(pending, loop).result()
            store.restore(ObjectId.from_hex(found["tree"]), Path(dest), progress=progress)

        async def cloned(_result) -> dict:
            return {"result": {**found, "dest": dest}}
        return await ndjson(request, fetch_and_restore, cloned)
    version = await asyncio.to_thread(store.catalog.resolve, str(data.get("ref", "")))

    async def finish(_result) -> dict:
        return {"result": {**version.to_dict(), "dest": dest}}
    return await ndjson(request, lambda p: store.restore(version.tree, Path(dest), progress=p), finish)


@routes.post("/v1/datasets/delete")
async def delete(request: web.Request) -> web.Response:
    store = request.app[keys.STORE]
    ref = str((await body(request)).get("ref", ""))
    name, _, version = ref.partition(":")
    cluster = _cluster(request)
    if version == "latest":
        version = str((await cluster.resolve(ref))["version"] if cluster is not None else
                      (await asyncio.to_thread(store.catalog.resolve, ref)).version)
    if version and not version.isdigit():
        raise UserError(f"{ref!r}: version must be a number", hint="floyd data delete NAME or NAME:3")
    if cluster is not None:
        await cluster.delete(name, int(version) if version else None)
        return reply({"deleted": ref})
    await asyncio.to_thread(store.catalog.resolve, ref)
    await asyncio.to_thread(store.catalog.delete, name, int(version) if version else None)
    return reply({"deleted": ref})


@routes.post("/v1/store/verify")
async def verify(request: web.Request) -> web.StreamResponse:
    store = request.app[keys.STORE]
    name = (await body(request)).get("name") or None
    if name is not None:
        await asyncio.to_thread(store.catalog.resolve, name)

    async def finish(report) -> dict:
        return {"result": report.to_dict()}
    return await ndjson(request, lambda p: store.verify(name, progress=p), finish)


@routes.post("/v1/store/gc")
async def gc(request: web.Request) -> web.Response:
    store = request.app[keys.STORE]
    report = await asyncio.to_thread(store.gc)
    return reply(report.to_dict())


def _cluster(request: web.Request):
    """The cluster's catalog (a ClusterDatasets), or None on a single box."""
    return request.app.get(keys.CLUSTER_DATASETS)


def _describe(version: dict, tree) -> dict:
    entries = [{"path": e.path, "kind": e.kind, "size": e.size, "mode": e.mode} for e in tree.entries]
    return {**version, "entries": entries[:1000], "truncated": len(entries) > 1000}
