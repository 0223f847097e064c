"""Store objects between nodes: the route that serves them and the fetch that pulls a tree.

Every node of a cluster holds the same store secret (copied at join), so a sealed object
is valid on every node as it lies on disk: a peer serves the stored bytes unchanged, once it
has opened them itself (a damaged copy is refused, and repaired in the background through
the store's repairer), and the receiver opens (authenticates, decrypts, re-hashes against
the id) each one before it keeps it. A source that has no copy, a damaged one, sends wrong
bytes or does not answer is passed over and the next source is asked; nothing unverified is
ever written::

    GET /cluster/v1/store/objects/{hex}   -> the sealed object (application/octet-stream)
                                             400 malformed id, 404 not stored here,
                                             500 integrity_error: damaged here

The route is mounted on the node-to-node app only, behind ``require_peer_cert``: a caller
without a certificate of this cluster never reaches it.

:func:`fetch_tree` makes a tree complete in the local store: its manifest first, then every
missing object, a few at a time, each from the first source that has a good copy (a local
manifest that is damaged is fetched again too; damaged data objects are healed by the
restore that meets them, :attr:`floydd.store.Store.repairer`). It holds the
store's shared lock from its first ``has()`` until the tree is pinned under an upload lease
(``upload:fetch-<tree>``, 24 h, renewed by each fetch; a version added for the tree drops
it, as for a snapshot), so gc never removes half a fetch, nor the tree before its caller
roots it (a version, a job's pin) or restores it; a fetch killed midway leaves only
unreferenced objects for gc.
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import Executor
from typing import Callable, Iterable, Protocol

from aiohttp import web

from floydd import log
from floydd.cluster.net.routes import OBJECTS_PATH, object_routes
from floydd.cluster.net.transport import error_response
from floydd.errors import FloyddError, IntegrityError, NotFound, Unavailable
from floydd.store.catalog import UPLOAD_LEASE_S
from floydd.store.keys.crypto import OVERHEAD
from floydd.store.ids import ObjectId
from floydd.store.store import Store
from floydd.store.tree import Tree

__all__ = ["store_routes", "fetch_tree", "fetch_manifest", "fetch_objects", "OBJECTS_PATH", "FETCH_CONCURRENCY"]

FETCH_CONCURRENCY = 4
"""Objects fetched at the same time by one :func:`fetch_tree`."""

_log = log.cluster.getChild("peerstore")

Progress = Callable[[int, int], object]


class Fetcher(Protocol):
    """What :func:`fetch_tree` needs of the cluster service (``ClusterService.fetch``) or the transport."""

    async def fetch(self, peer: str, path: str) -> tuple[bytes, dict[str, str]]: ...


def store_routes(store: Store) -> list[web.RouteDef]:
    """``GET /cluster/v1/store/objects/{hex}``: mount on the mTLS app only."""

    async def get_object(request: web.Request) -> web.Response:
        try:
            oid = ObjectId.from_hex(request.match_info["hex"])
            data = await asyncio.to_thread(store.load_sealed, oid, verify=True)
        except FloyddError as exc:
            return error_response(exc)
        return web.Response(body=data, content_type="application/octet-stream")

    return object_routes(get_object)


async def fetch_tree(store: Store, tree: str, sources: Iterable[str], transport: Fetcher, *,
                     progress: Progress | None = None) -> int:
    """Make tree ``tree`` (hex id) and every object it references present in ``store``,
    fetching what is missing from the ``sources`` (node ids, tried in order); returns the
    bytes fetched (0 when all was here). ``Unavailable`` when no source has an object."""
    tree_id = ObjectId.from_hex(tree)
    pool = _Sources(tree_id, (s for s in sources if s != getattr(transport, "node_id", None)))
    async with _holding(store):
        manifest, fetched = await _manifest(store, tree_id, pool, transport)
        missing = await asyncio.to_thread(_missing, store, manifest)
        if missing:
            fetched += await _fetch_all(store, missing, pool, transport, progress)
        await asyncio.to_thread(store.catalog.pin, tree_id, f"upload:fetch-{tree_id.hex[:24]}",
                                ttl_s=UPLOAD_LEASE_S)
    if fetched:
        _log.info("[%s] fetched tree %s (%d bytes, %d objects it lacked) from %s", getattr(transport, "node_id", "?"),
                  tree_id.short, fetched, len(missing), ", ".join(sorted(pool.used)))
    return fetched


async def fetch_manifest(store: Store, tree: str, sources: Iterable[str], transport: Fetcher) -> Tree:
    """The manifest of ``tree``, from the local store or (kept, unpinned) from a source: to
    describe a version without fetching its files."""
    tree_id = ObjectId.from_hex(tree)
    manifest, _ = await _manifest(store, tree_id, _Sources(tree_id, sources), transport)
    return manifest


async def fetch_objects(store: Store, oids: Iterable[ObjectId], sources: Iterable[str],
                        transport: Fetcher, *, executor: Executor | None = None) -> dict[ObjectId, str]:
    """Good copies of ``oids`` from the ``sources`` (node ids, in order), each verified before
    it replaces a missing or damaged copy here (repairs: :mod:`floydd.cluster.replication.storecare`); id
    -> "" when repaired, else why not. ``executor`` runs the checks and writes (a repair that a
    restore waits for must not need a thread of the pool the restore holds)."""
    pool = _Sources(None, (s for s in sources if s != getattr(transport, "node_id", None)))
    out: dict[ObjectId, str] = {}
    for oid in oids:
        try:
            await _fetch_one(store, oid, pool, transport, executor)
            out[oid] = ""
        except Unavailable as exc:
            out[oid] = exc.message
    return out


# -- helpers ------------------------------------------------------------------------------

class _Sources:
    """The nodes to ask, in order; one that could not be reached is asked last from then on."""

    def __init__(self, tree_id: ObjectId | None, sources: Iterable[str]) -> None:
        self.tree_id = tree_id
        self.order = list(dict.fromkeys(sources))
        self.down: set[str] = set()
        self.used: set[str] = set()

    def ranked(self) -> list[str]:
        return [s for s in self.order if s not in self.down] + [s for s in self.order if s in self.down]

    def none_has(self, oid: ObjectId, why: list[str]) -> Unavailable:
        if self.tree_id is None:
            what = f"object {oid.short}"
        elif oid == self.tree_id:
            what = f"tree {oid.short}"
        else:
            what = f"object {oid.short} of tree {self.tree_id.short}"
        tried = ", ".join(self.order) or "none"
        return Unavailable(f"no node could send {what} (nodes tried: {tried})"
                           + (f": {'; '.join(why)}" if why else ""),
                           hint="start a node that holds this data (floyd data list shows its holders), "
                                "or upload it again")


async def _manifest(store: Store, tree_id: ObjectId, pool: _Sources, transport: Fetcher) -> tuple[Tree, int]:
    if await asyncio.to_thread(store.backend.has, tree_id):
        try:
            return await asyncio.to_thread(store.read_tree, tree_id), 0
        except IntegrityError as exc:   # damaged here: a good copy replaces it
            _log.warning("the local copy of tree %s is damaged (%s); fetching a good one", tree_id.short,
                         exc.message)
    plain, size = await _fetch_one(store, tree_id, pool, transport)
    return await asyncio.to_thread(Tree.decode, plain, name=f"tree {tree_id.short}"), size


async def _fetch_one(store: Store, oid: ObjectId, pool: _Sources, transport: Fetcher,
                     executor: Executor | None = None) -> tuple[bytes, int]:
    """Object ``oid`` from the first source with good bytes, verified and stored: (plaintext, size)."""
    why: list[str] = []
    for peer in pool.ranked():
        try:
            data, _headers = await transport.fetch(peer, OBJECTS_PATH + oid.hex)
        except NotFound:
            why.append(f"{peer}: does not have it")
            continue
        except FloyddError as exc:      # unreachable, or an error of the peer's own
            if isinstance(exc, Unavailable):
                pool.down.add(peer)
            why.append(f"{peer}: {exc.message}")
            continue
        try:
            plain = await asyncio.get_running_loop().run_in_executor(executor, store.save_sealed, oid, data)
        except IntegrityError as exc:   # what the peer sent; a local failure (disk full) is raised
            _log.warning("node %s sent bad bytes for object %s: %s; trying the next node", peer, oid.short,
                         exc.message)
            why.append(f"{peer}: sent bad bytes")
            continue
        pool.down.discard(peer)
        pool.used.add(peer)
        return plain, len(data)
    raise pool.none_has(oid, why)


async def _fetch_all(store: Store, missing: dict[ObjectId, int], pool: _Sources, transport: Fetcher,
                     progress: Progress | None) -> int:
    """Fetch ``missing`` (id -> estimated size) with FETCH_CONCURRENCY workers; bytes fetched."""
    queue = list(missing)
    total = sum(missing.values())
    done = fetched = 0
    if progress:
        progress(0, total)

    async def worker() -> None:
        nonlocal done, fetched
        while queue:
            oid = queue.pop()
            _plain, size = await _fetch_one(store, oid, pool, transport)
            fetched += size
            done += missing[oid]
            if progress:
                progress(done, total)

    workers = [asyncio.create_task(worker()) for _ in range(min(FETCH_CONCURRENCY, len(queue)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return fetched


def _missing(store: Store, tree: Tree) -> dict[ObjectId, int]:
    """The objects of ``tree`` not stored here, each with an estimate of its size (for progress)."""
    sizes: dict[ObjectId, int] = {}
    for e in tree.entries:
        if e.offset is not None:        # a small file inside a pack: the pack reaches past it
            sizes[e.chunks[0]] = max(sizes.get(e.chunks[0], 0), e.offset + e.size)
        for c in e.chunks if e.offset is None else ():
            sizes[c] = max(sizes.get(c, 0), e.size // len(e.chunks))
    return {oid: size + OVERHEAD for oid, size in sizes.items() if not store.backend.has(oid)}


@contextlib.asynccontextmanager
async def _holding(store: Store):
    """The store's shared lock for the whole fetch, taken in a thread (it may wait for gc),
    and given back even when the fetch is cancelled while it is being taken."""
    stack = contextlib.ExitStack()
    taking = asyncio.ensure_future(asyncio.to_thread(stack.enter_context, store.holding()))
    try:
        await asyncio.shield(taking)
    except asyncio.CancelledError:
        taking.add_done_callback(lambda t: (t.cancelled() or t.exception(), stack.close()))
        raise
    try:
        yield
    finally:
        stack.close()
