"""``/v1/datasets`` and ``/v1/store``: versioned datasets over the encrypted store.

The versions are the cluster's (:class:`~floydd.cluster.datasets.ClusterDatasets`; a lone
box is a cluster of one): an upload is snapshotted into this node's store and registered
in the cluster catalog; list and info read the catalog (list shows each version's
holders); clone first fetches what this node lacks from the holders; delete goes through
the cluster. ``/v1/store`` (verify, gc) is this node's store.
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
from floydd.model import DatasetRef, check_dataset_name
from floydd.store.ids import ObjectId

routes = web.RouteTableDef()


@routes.get("/v1/datasets")
async def list_datasets(request: web.Request) -> web.Response:
    return reply(await _catalog(request).list(request.query.get("name") or None))


@routes.get("/v1/datasets/info")
async def info(request: web.Request) -> web.Response:
    ref = request.query.get("ref", "")
    if not ref:
        raise UserError("name a dataset", hint="floyd data info NAME[:VERSION]")
    catalog = _catalog(request)
    version = await catalog.resolve(ref)
    return reply(_describe(version, await catalog.manifest(version)))


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
        check_dataset_name(name)
    async with received_folder(request, what="the dataset") as (folder, _got):
        return await _ingest(request, name, str(folder), request.query.get("message") or "",
                             request.query.get("idem_key"))


@routes.get("/v1/datasets/tar")
async def clone_tar(request: web.Request) -> web.StreamResponse:
    """Version ``?ref=NAME[:N]`` as a tar (fetched from its holders first)."""
    catalog = _catalog(request)
    found = await catalog.resolve(request.query.get("ref", ""))
    loop = asyncio.get_running_loop()

    def fetch() -> None:
        asyncio.run_coroutine_threadsafe(catalog.ensure_local(found["tree"], found["holders"]), loop).result()
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
    check_dataset_name(name)
    catalog = _catalog(request)
    idem_key = idem_key if isinstance(idem_key, str) and idem_key else f"upload:{secrets.token_hex(16)}"

    def snapshot(progress):
        return store.snapshot_report(Path(path), progress=progress)

    async def register(result) -> dict:
        return {"result": await catalog.register(name, str(result.tree), size=result.size, files=result.files,
                                                 message=str(message), idem_key=idem_key)}
    return await ndjson(request, snapshot, register)


@routes.post("/v1/datasets/clone")
async def clone(request: web.Request) -> web.StreamResponse:
    store = request.app[keys.STORE]
    data = await body(request)
    dest = check_dest(data.get("dest"))
    catalog = _catalog(request)
    found = await catalog.resolve(str(data.get("ref", "")))
    loop = asyncio.get_running_loop()

    def fetch_and_restore(progress) -> None:
        pending = catalog.ensure_local(found["tree"], found["holders"], progress=progress)
        asyncio.run_coroutine_threadsafe(pending, loop).result()
        store.restore(ObjectId.from_hex(found["tree"]), Path(dest), progress=progress)

    async def cloned(_result) -> dict:
        return {"result": {**found, "dest": dest}}
    return await ndjson(request, fetch_and_restore, cloned)


@routes.post("/v1/datasets/delete")
async def delete(request: web.Request) -> web.Response:
    ref = str((await body(request)).get("ref", ""))
    catalog = _catalog(request)
    parsed = DatasetRef.parse(ref)              # NAME: every version; NAME:latest: the newest one
    number = (await catalog.resolve(ref))["version"] if ref.endswith(":latest") else parsed.version
    await catalog.delete(parsed.name, number)
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


def _catalog(request: web.Request):
    """The cluster's dataset catalog (a ClusterDatasets)."""
    return request.app[keys.DATASETS]


def _describe(version: dict, tree) -> dict:
    entries = [{"path": e.path, "kind": e.kind, "size": e.size, "mode": e.mode} for e in tree.entries]
    return {**version, "entries": entries[:1000], "truncated": len(entries) > 1000}
