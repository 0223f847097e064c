"""``/v1/datasets`` and ``/v1/store``: versioned datasets over the encrypted store.

The versions are the cluster's (:class:`~floydd.cluster.replication.datasets.ClusterDatasets`; a lone
box is a cluster of one): an upload is snapshotted into this node's store, registered in
the cluster catalog, and answered once R copies are kept (or its wait is over: the answer
then says how many there are, ``copies_note``: "stored on 1 of 2 boxes; the second copy
follows"); list and info read the catalog and show each version's copies (holders, those
that count, those silent); clone first fetches what this node lacks from the holders;
delete goes through the cluster. ``/v1/store`` (verify, gc) is this node's store: verify with ``repair`` fetches
good copies of damaged objects from other nodes, and gc also keeps the trees the cluster and
the job records still name (:mod:`floydd.cluster.replication.storecare`); both are an admin's.

Every road to a version asks :mod:`floydd.cluster.state.access` first: the listing shows only what
the caller may read (no tree id of anything else), info/tar/clone check read or clone, an
upload checks that the caller may add a version (before the folder is read), a delete that
they may delete; a job's output (``PROJECT/N/output``) is its job's owner's.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

from aiohttp import web

from floydd.api import keys
from floydd.api.params import text_field
from floydd.api.request import acting_person, acting_user, body, check_dest, ndjson, reply, restore_into, same_user_only
from floydd.api.tarstream import received_folder, send_tree
from floydd.cluster.state import keyepochs
from floydd.cluster.state.access import check_admin
from floydd.cluster.replication.storecare import named_trees, repair_damaged
from floydd.errors import Conflict, FloyddError, NotFound, UserError
from floydd.model import DatasetRef, check_abs_path, check_upload_name
from floydd.store.ids import ObjectId

routes = web.RouteTableDef()

_MESSAGE = 'a short note, e.g. -m "cleaned labels"'
_IDEM = "leave it out; the CLI sends none"
_REF = "write NAME, NAME:N or NAME:latest"


@routes.get("/v1/datasets")
async def list_datasets(request: web.Request) -> web.Response:
    """The versions the caller may read (someone else's private dataset is not listed)."""
    return reply(await _catalog(request).list(request.query.get("name") or None,
                                              reader=acting_person(request, required=False)))


@routes.get("/v1/datasets/info")
async def info(request: web.Request) -> web.Response:
    ref = request.query.get("ref", "")
    if not ref:
        raise UserError("name a dataset", hint="floyd data info NAME[:VERSION]")
    catalog = _catalog(request)
    version = await catalog.resolve_readable(ref, acting_person(request, required=False), "read")
    described = _describe(catalog.describe(version), await catalog.manifest(version))
    try:                            # its objects here by store key epoch (floydd.store.keys.epochs)
        epochs = await asyncio.to_thread(catalog.store.epochs_of, ObjectId.from_hex(described["tree"]))
    except FloyddError:
        epochs = None
    return reply({**described, "key_epochs": None if epochs is None else {str(k): v for k, v in sorted(epochs.items())},
                  "cluster_key_epoch": keyepochs.current(catalog.cluster.state)})


@routes.post("/v1/datasets")
async def upload(request: web.Request) -> web.StreamResponse:
    """Snapshot a folder on this machine into a new version; streams progress."""
    data = await body(request)
    name, path = data.get("name"), data.get("path")
    message, idem_key = text_field(data, "message", hint=_MESSAGE), text_field(data, "idem_key", limit=128, hint=_IDEM)
    visibility = _visibility(data.get("visibility"))
    user = acting_user(request)                 # refused at once for a caller with no account
    _check_name(name)
    _catalog(request).check_may_add(name, user)     # whose the dataset is, said before whose the folder is
    check_abs_path(path, "path", hint="floyd data upload PATH --name NAME")
    same_user_only(request, "a folder to upload")   # a path of this machine: the daemon's own user's only
    if not os.path.exists(path):
        raise UserError(f"{path} does not exist", hint="check the path you gave to floyd data upload")
    if not os.path.isdir(path):
        raise UserError(f"{path} is not a folder", hint="put the file(s) in a folder and upload the folder")
    return await _ingest(request, name, path, message, idem_key, visibility)


@routes.post("/v1/datasets/tar")
async def upload_tar(request: web.Request) -> web.StreamResponse:
    """The same from a folder sent as a tar (``?name=&message=``), for a client elsewhere."""
    q = request.query
    name = q.get("name") or ""
    if name:                                    # a bad name is refused before the upload is read
        check_upload_name(name)
    message, idem_key = text_field(q, "message", hint=_MESSAGE), text_field(q, "idem_key", limit=128, hint=_IDEM)
    visibility = _visibility(q.get("visibility"))
    user = acting_user(request)                 # a caller with no account is refused before the upload
    if name:
        _catalog(request).check_may_add(name, user)     # so is a version of someone else's dataset
    async with received_folder(request, what="the dataset") as (folder, _got):
        return await _ingest(request, name, str(folder), message, idem_key, visibility)


@routes.get("/v1/datasets/tar")
async def clone_tar(request: web.Request) -> web.StreamResponse:
    """Version ``?ref=NAME[:N]`` as a tar (fetched from its holders first)."""
    catalog = _catalog(request)
    found = await catalog.resolve_readable(request.query.get("ref", ""), acting_person(request, required=False),
                                           "clone")
    loop = asyncio.get_running_loop()

    def fetch() -> None:
        asyncio.run_coroutine_threadsafe(catalog.ensure_local(found["tree"], found["holders"]), loop).result()
    return await send_tree(request, ObjectId.from_hex(found["tree"]), prepare=fetch)


def _check_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise UserError("name the dataset", hint="floyd data upload PATH --name NAME")
    check_upload_name(name)


def _visibility(value) -> str | None:
    """An upload's ``visibility``: ``lab``, ``private`` or None (a new dataset: lab; else as it is)."""
    if value in (None, ""):
        return None
    if value not in ("lab", "private"):
        raise UserError(f"visibility {str(value)[:40]!r} is not lab or private",
                        hint="floyd data upload --private makes a dataset only its owner and admins can use")
    return value


async def _ingest(request: web.Request, name, path: str, message: str, idem_key: str,
                  visibility: str | None) -> web.StreamResponse:
    """Snapshot the folder ``path`` (checked by the caller: the daemon's own user's path, or a
    tar this daemon unpacked itself) into the next version of ``name``."""
    store = request.app[keys.STORE]
    user = acting_user(request)                 # refused at once for a caller with no account
    _check_name(name)
    catalog = _catalog(request)
    idem_key = idem_key or f"upload:{secrets.token_hex(16)}"

    def snapshot(progress):
        return store.snapshot_report(Path(path), progress=progress)

    async def register(result) -> dict:
        version = await catalog.register(name, str(result.tree), size=result.size, files=result.files,
                                         message=message, idem_key=idem_key, user=user, visibility=visibility)
        return {"result": await catalog.wait_for_copies(version)}
    return await ndjson(request, snapshot, register)


@routes.post("/v1/datasets/clone")
async def clone(request: web.Request) -> web.StreamResponse:
    store = request.app[keys.STORE]
    data = await body(request)
    catalog = _catalog(request)
    found = await catalog.resolve_readable(text_field(data, "ref", hint=_REF),
                                           acting_person(request, required=False), "clone")
    dest = check_dest(data.get("dest"), request)
    loop = asyncio.get_running_loop()

    def fetch_and_restore(progress) -> None:
        pending = catalog.ensure_local(found["tree"], found["holders"], progress=progress)
        asyncio.run_coroutine_threadsafe(pending, loop).result()
        restore_into(store, ObjectId.from_hex(found["tree"]), dest, progress)

    async def cloned(_result) -> dict:
        return {"result": {**found, "dest": dest}}
    return await ndjson(request, fetch_and_restore, cloned)


@routes.post("/v1/datasets/delete")
async def delete(request: web.Request) -> web.Response:
    ref = text_field(await body(request), "ref", hint=_REF)
    catalog = _catalog(request)
    parsed = DatasetRef.parse(ref)              # NAME: every version; NAME:latest: the newest one
    user = acting_user(request)
    number = (await catalog.resolve(ref))["version"] if ref.endswith(":latest") else parsed.version
    catalog.check_may_delete(parsed.name, ref, user)    # checked again on apply, by every box
    await catalog.delete(parsed.name, number, user=user)
    return reply({"deleted": ref})


@routes.post("/v1/store/verify")
async def verify(request: web.Request) -> web.StreamResponse:
    """``{"name"?, "repair"?}``: with ``repair``, damaged objects are fetched again from other nodes."""
    store = request.app[keys.STORE]
    data = await body(request)
    check_admin(request.app[keys.CLUSTER].state, acting_person(request, required=False),
                "verify or repair this box's store")
    name = text_field(data, "name", hint="name a dataset, or leave name out to check them all") or None
    repair = data.get("repair", False)
    if not isinstance(repair, bool):
        raise UserError("repair must be true or false", hint="floyd data verify --repair")
    if name is not None:
        await _held_here(request, name)

    async def finish(report) -> dict:
        if repair and report.damaged:
            return {"result": await repair_damaged(report, _catalog(request))}
        return {"result": report.to_dict()}
    return await ndjson(request, lambda p: store.verify(name, progress=p), finish)


@routes.post("/v1/store/gc")
async def gc(request: web.Request) -> web.Response:
    """Keeps what the local catalog names and what the cluster and the job records still name."""
    store, cluster = request.app[keys.STORE], request.app[keys.CLUSTER]
    check_admin(cluster.state, acting_person(request, required=False), "collect this box's store's garbage")
    runs = await asyncio.to_thread(request.app[keys.RECORDS].list_runs)
    report = await asyncio.to_thread(store.gc, keep=named_trees(cluster.state, cluster.node_id, runs))
    return reply(report.to_dict())


async def _held_here(request: web.Request, name: str) -> None:
    """Refuse to verify ``name`` on a box that holds no copy of it, naming the boxes that do
    (issue 21: it said the dataset did not exist); a name no box knows is not found."""
    try:
        await asyncio.to_thread(request.app[keys.STORE].catalog.resolve, name)
        return
    except NotFound as missing:
        unknown = missing
    versions = await _catalog(request).list(name.partition(":")[0], everything=True)
    if not versions:
        raise unknown
    held = sorted({holder for v in versions for holder in v["held_by"]})
    here = request.app[keys.CLUSTER].state.nodes.get(request.app[keys.CLUSTER].node_id, {}).get("name", "this box")
    if not held:
        raise Conflict(f"{here} holds no copy of {name}, and no box does (floyd data ls {name} shows its copies)",
                       code="not_held_here", hint="upload it again if you still have it")
    boxes = held[0] if len(held) == 1 else ", ".join(held[:-1]) + " and " + held[-1]
    raise Conflict(f"{here} holds no copy of {name}; {boxes} {'does' if len(held) == 1 else 'do'}",
                   code="not_held_here",
                   hint=f"verify it where it is kept: run floyd data verify {name} on {held[0]}, or leave the name "
                        "out to check every object this box holds")


def _catalog(request: web.Request):
    """The cluster's dataset catalog (a ClusterDatasets)."""
    return request.app[keys.DATASETS]


def _describe(version: dict, tree) -> dict:
    entries = [{"path": e.path, "kind": e.kind, "size": e.size, "mode": e.mode} for e in tree.entries]
    return {**version, "entries": entries[:1000], "truncated": len(entries) > 1000}
