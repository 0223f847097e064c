"""``floyd export``: jobs (with everything they need) and datasets into one export file.

Two steps, so that nothing is streamed before everything was found::

    gather (async, on the loop)                      write (a worker thread)
    ───────────────────────────                      ───────────────────────
    the jobs named (a project: its ended jobs;       one pass over the store: each tree's
    a job: it must have ended), each checked for     new chunks opened (authenticated,
    the caller (owner or admin); their events,       re-hashed) with this store's key and
    metric series, samples and log read from the     sealed again under the export key, a
    box that ran them (a box that is away fails      few read ahead on a pool; then the
    the export, naming it); their code, output and   tree, the dataset and job documents,
    mounted dataset versions made complete here      the records from the spool; then the
    (fetched from their holders); the records        manifest, its MAC and the signature
    spooled to a scratch folder                      (:mod:`floydd.bundle.signing`)

Into a file handed to the daemon, gathering is cut in two: :func:`find` (what is named, checked,
its datasets brought here: what can refuse the export) before the file starts, then the jobs'
records gathered by a :class:`JobFeed` while the datasets, which come first in the file and
are most of it, are written.

Memory stays bounded: a job's records are spooled one job at a time, chunks are read a few
ahead, and ``out`` gets the file as it is written (the API streams it to the client). Trees
are pinned meanwhile by their fetch leases, job pins and versions, and the store's shared
lock is held while writing, so gc removes none of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

import msgpack

from floydd.cluster.state import access
from floydd.errors import Conflict, NotFound, UserError
from floydd.exchange import parts
from floydd.bundle.container import MAX_RECORD, Writer, compressor, pack
from floydd.bundle.crypto import FILE_ID_SIZE, ExportKey
from floydd.bundle.signing import sign, signer
from floydd.model import FINAL_STATES, JobKey, JobView, Mount, check_project
from floydd.store.keys.crypto import OVERHEAD
from floydd.store.ids import ObjectId

__all__ = ["Plan", "DatasetItem", "JobItem", "JobFeed", "gather", "find", "write"]

_AHEAD = 4
_GATHER = 4
"""Jobs whose records are read (from their boxes) at the same time."""


@dataclass(slots=True)
class DatasetItem:
    ref: str
    name: str
    version: int
    tree: ObjectId
    message: str = ""
    created: float = 0.0
    alone: bool = False            # named by the caller (else: mounted by a job)


@dataclass(slots=True)
class JobItem:
    doc: dict
    events: Path
    metrics: Path
    samples: Path
    log: Path
    code: ObjectId | None
    output: ObjectId | None


@dataclass(slots=True)
class Plan:
    datasets: dict[str, DatasetItem] = field(default_factory=dict)      # tree hex -> the version
    views: list[JobView] = field(default_factory=list)                 # the jobs named, in order
    jobs: Iterable[JobItem] = field(default_factory=list)              # theirs gathered (or a JobFeed)
    skipped: list[str] = field(default_factory=list)                   # a project's jobs not ended
    estimate: int = 0                                                  # bytes of the file, about

    def contents(self) -> dict:
        return {"jobs": [v.id for v in self.views],
                "datasets": sorted(d.ref for d in self.datasets.values() if d.alone),
                "mounted": sorted(d.ref for d in self.datasets.values() if not d.alone),
                "skipped": self.skipped}


async def gather(*, jobs: Any, datasets: Any, selection: Iterable[str], refs: Iterable[str], person: str,
                 spool: Path) -> Plan:
    """Find what ``selection`` (``PROJECT`` or ``PROJECT/N``) and ``refs`` (dataset versions)
    name, for ``person``, and bring it here (see the module docstring). ``jobs`` is the
    :class:`~floydd.jobs.service.JobService`, ``datasets`` the cluster's catalog."""
    plan = await find(jobs=jobs, datasets=datasets, selection=selection, refs=refs, person=person)
    feed = JobFeed(jobs, plan, spool)
    try:
        plan.jobs = await feed.all()
    finally:
        await feed.aclose()
    return plan


async def find(*, jobs: Any, datasets: Any, selection: Iterable[str], refs: Iterable[str], person: str) -> Plan:
    """The first half of :func:`gather`: what is named, checked for ``person``, and its dataset
    versions brought here; the jobs' records and trees are left to a :class:`JobFeed`.
    Whatever refuses the export (a job not ended, someone else's, a dataset gone) is raised
    here, before a byte of the file is written."""
    plan = Plan()
    for ref in refs:
        version = await datasets.resolve_readable(ref, person, "clone", doing="export")
        if version["name"].endswith("/output"):
            job = version["name"].removesuffix("/output")
            raise UserError(f"{version['ref']} is the output of job {job}: it goes with its job",
                            hint=f"floyd export {job} --to FILE (its records, code and output)")
        await datasets.ensure_local(version["tree"], version.get("holders") or [])
        plan.datasets[version["tree"]] = DatasetItem(
            ref=version["ref"], name=version["name"], version=version["version"],
            tree=ObjectId.from_hex(version["tree"]), message=version.get("message") or "",
            created=version.get("created") or 0.0, alone=True)
    plan.views = views = await _jobs(jobs, list(selection), plan)
    state = jobs.cluster.state
    for view in views:                  # an export copies each part of a job: each part's rule
        for part, verb in (("code", "clone"), ("output", "clone"), ("logs", "read"), ("metrics", "read")):
            access.check(state, person, access.job_target(view, part), verb, jobs.rules, doing="export")
    for view in views:                  # the datasets the jobs mounted, each brought here once
        for mount in view.data:
            if mount.tree not in plan.datasets:
                plan.datasets[mount.tree] = await _mounted(datasets, mount, person)
    if not views and not plan.datasets:
        raise UserError("nothing to export" + (f": {', '.join(plan.skipped)} have not ended" if plan.skipped else ""),
                        hint="name ended jobs (PROJECT or PROJECT/N) or dataset versions (NAME:N)")
    plan.estimate = await _estimate(jobs.store, plan)
    return plan


class JobFeed:
    """The jobs of a :func:`find` plan, gathered on the loop (their records read from the boxes
    that ran them and spooled, their code and output made complete here; :data:`_GATHER` at a
    time) while :func:`write` runs in a thread: iterating it there yields them in order, each
    once it is ready, so the datasets (the bulk of a file) are written meanwhile. A job that
    fails to gather fails the iteration, hence the export. The tasks are the feed's: close it
    (:meth:`aclose`) when the writing is over, however it ended."""

    def __init__(self, service: Any, plan: Plan, spool: Path) -> None:
        self._loop = asyncio.get_running_loop()
        self._plan, self._store = plan, service.store
        slots = asyncio.Semaphore(_GATHER)

        async def one(view: JobView) -> JobItem:
            async with slots:
                return await _job(service, view, spool)
        self._tasks = [asyncio.create_task(one(view)) for view in plan.views]
        self._estimated = asyncio.create_task(self._estimate())

    def __iter__(self) -> Iterator[JobItem]:
        for task in self._tasks:
            yield asyncio.run_coroutine_threadsafe(_result(task), self._loop).result()

    async def all(self) -> list[JobItem]:
        """Every job, gathered (and the plan's estimate with them)."""
        jobs = list(await asyncio.gather(*self._tasks))
        await self._estimated
        return jobs

    async def aclose(self) -> None:
        """Cancel what is still gathering and wait for it."""
        for task in (*self._tasks, self._estimated):
            task.cancel()
        await asyncio.gather(*self._tasks, self._estimated, return_exceptions=True)

    async def _estimate(self) -> None:
        """The plan's estimate with its jobs, once they are gathered."""
        plan = replace(self._plan, jobs=list(await asyncio.gather(*self._tasks)))
        self._plan.estimate = await _estimate(self._store, plan)


async def _result(task: asyncio.Task) -> Any:
    return await task


def write(plan: Plan, *, store: Any, out: IO[bytes], key: ExportKey, kdf: dict, identity: Any,
          exported_by: str, box: str = "", created: float | None = None,
          buffers: Callable[[int], bytearray] = bytearray) -> dict:
    """Write the export of ``plan`` to ``out`` (blocking; the store's shared lock is held;
    ``buffers``: see :class:`~floydd.bundle.container.Writer`). The manifest is returned."""
    created = time.time() if created is None else created
    w = Writer(out, key, kdf=kdf, file_id=secrets.token_bytes(FILE_ID_SIZE), created=created, buffers=buffers)
    trees = _Trees(w, store)
    with store.holding(), ThreadPoolExecutor(2, thread_name_prefix="floydd-export") as pool:
        trees.pool = pool
        for item in plan.datasets.values():
            _dataset(w, trees, item)
        for job in plan.jobs:
            doc, key_ = job.doc, job.doc["id"]
            for mount in doc["spec"]["data"]:
                _dataset(w, trees, plan.datasets[mount["tree"]])
            if job.code is not None:
                trees.write(job.code, f"code of {key_}")
            if job.output is not None:
                trees.write(job.output, f"output of {key_}")
            _json_part(w, parts.JOB, f"job {key_}", doc)
            for kind, path in ((parts.METRICS, job.metrics), (parts.SAMPLES, job.samples),
                               (parts.EVENTS, job.events), (parts.LOG, job.log)):
                _file_part(w, kind, f"{kind} of {key_}", path)
        manifest = {"created": created, "exported_by": exported_by, "box": box,
                    "contents": plan.contents(), "chunks": len(trees.written)}
        w.finish(manifest, signer(identity), lambda body: sign(identity, body))
    return manifest


# -- gathering ------------------------------------------------------------------------------------

async def _jobs(service: Any, selection: list[str], plan: Plan) -> list[JobView]:
    """The views of the jobs named, in order, each once; a project's jobs not ended go to
    ``plan.skipped``, a job named on its own must have ended."""
    seen: dict[str, JobView] = {}
    for item in selection:
        if "/" in item:
            view = await service.get(str(JobKey.parse(item)))
            if view.state not in FINAL_STATES:
                raise Conflict(f"{view.id} is {view.state}: only ended jobs are exported",
                               code="job_active", hint=f"wait for it (floyd logs -f {view.id}) or stop it first")
            seen.setdefault(view.id, view)
            continue
        check_project(item)
        found = await service.list(item)
        if not found:
            raise NotFound(f"project {item} has no jobs", code="project_not_found", hint="floyd status lists jobs")
        for view in sorted(found, key=lambda j: j.number):
            if view.state in FINAL_STATES:
                seen.setdefault(view.id, await service.get(view.id))
            else:
                plan.skipped.append(view.id)
    return list(seen.values())


async def _job(service: Any, view: JobView, spool: Path) -> JobItem:
    key = view.id
    folder = spool / f"{view.project}-{view.number}"
    folder.mkdir(parents=True)
    events = await service.events(key)
    metrics = await service.metrics(key)
    points = [[name, step, value, ts] for name, series in metrics["metrics"].items() for step, value, ts in series]
    paths = {name: folder / name for name in ("events", "metrics", "samples", "log")}
    _spool(paths["events"], events)
    _spool(paths["metrics"], points)
    _spool(paths["samples"], metrics.get("system") or [])
    with open(paths["log"], "wb") as log:
        offset = 0
        while True:
            chunk, _final = await service.read_log(key, offset)
            if not chunk:
                break
            log.write(chunk)
            offset += len(chunk)
    code = await service.tree_for(key, "code", view) if view.code_tree else None
    output = None
    if view.output_version:
        try:
            output = await service.tree_for(key, "output", view)
        except NotFound:            # its output was deleted since: the job goes without it
            view = replace(view, output_version=None)
    doc = parts.job_document(view)
    doc["output"] = None if output is None else {"ref": view.output_version, "tree": str(output)}
    return JobItem(doc=doc, code=code, output=output, **{k: paths[k] for k in ("events", "metrics", "samples", "log")})


async def _mounted(datasets: Any, mount: Mount, person: str) -> DatasetItem:
    """A dataset version a job mounted, brought here (it may have been deleted since: then its
    tree is looked for on every box)."""
    name, _, number = mount.ref.partition(":")
    holders: list[str] = []
    message, created = "", 0.0
    try:
        version = await datasets.resolve_readable(mount.ref, person, "clone", doing="export")
        if version["tree"] == mount.tree:
            holders, message, created = version.get("holders") or [], version.get("message") or "", version["created"]
    except NotFound:
        pass
    try:
        await datasets.ensure_local(mount.tree, holders)
    except NotFound:
        raise NotFound(f"{mount.ref}, which a job to export mounted, is on no box any more",
                       hint="export the job without it is not possible: its data is gone") from None
    return DatasetItem(ref=mount.ref, name=name, version=int(number or 0), tree=ObjectId.from_hex(mount.tree),
                       message=message, created=created)


def _spool(path: Path, items: list) -> None:
    """``items`` as msgpack batches of :data:`parts.BATCH`, one per line of the spool."""
    with open(path, "wb") as f:
        for i in range(0, len(items), parts.BATCH):
            f.write(parts.pack(items[i:i + parts.BATCH]))


async def _estimate(store: Any, plan: Plan) -> int:
    def count() -> int:
        seen: set[ObjectId] = set()
        total = 0
        trees = [d.tree for d in plan.datasets.values()] + [t for j in plan.jobs for t in (j.code, j.output) if t]
        for tree_id in trees:
            for oid in [tree_id, *store.read_tree(tree_id).chunk_ids()]:
                if oid not in seen:
                    seen.add(oid)
                    total += store.backend.stat(oid) - OVERHEAD + 64
        for job in plan.jobs:
            total += sum(os.path.getsize(p) + 256 for p in (job.events, job.metrics, job.samples, job.log))
        return total + (16 << 10)
    return await asyncio.to_thread(count)


# -- writing --------------------------------------------------------------------------------------

class _Trees:
    """Each tree into the file once, with the chunks the file does not hold yet."""

    def __init__(self, w: Writer, store: Any) -> None:
        self.w, self.store = w, store
        self.written: set[ObjectId] = set()
        self.trees: set[ObjectId] = set()
        self.pool: ThreadPoolExecutor | None = None
        self._buffer = bytearray()
        self._local = threading.local()         # each pool thread's compressor

    def write(self, tree_id: ObjectId, what: str) -> None:
        if tree_id in self.trees:
            return
        raw = self.store.read_object(tree_id)
        chunks = list(dict.fromkeys(c for e in self.store.read_tree(tree_id).entries for c in e.chunks))
        new = [c for c in chunks if c not in self.written]
        if new:
            with self.w.part(parts.DATA, f"data of {what}") as part:
                for oid, (data, packed) in _ahead(self.pool, lambda c: self._load(c, tree_id), new):
                    part.write(self._record(oid.raw, data), packed)
                    self.written.add(oid)
        with self.w.part(parts.TREE, f"tree of {what}") as part:
            part.write(tree_id.raw)
            for i in range(0, len(raw), MAX_RECORD):
                part.write(raw[i:i + MAX_RECORD])
        self.trees.add(tree_id)

    def _load(self, oid: ObjectId, tree_id: ObjectId) -> tuple[bytes, bytes | None]:
        """A chunk and its record (its id and bytes) compressed, or None where that does not pay:
        on the pool, a few ahead, so compressing runs beside the sealing and writing."""
        data = self.store.read_object(oid, tree_id)
        zstd = getattr(self._local, "zstd", None)
        if zstd is None:
            zstd = self._local.zstd = compressor()
        return data, pack(zstd, oid.raw, data)

    def _record(self, head: bytes, data: bytes) -> memoryview:
        """``head ‖ data`` in a buffer reused from record to record (no fresh 4 MiB a chunk)."""
        n = len(head) + len(data)
        if len(self._buffer) < n:
            self._buffer = bytearray(n)
        record = memoryview(self._buffer)[:n]
        record[:len(head)] = head
        record[len(head):] = data
        return record


def _dataset(w: Writer, trees: _Trees, item: DatasetItem) -> None:
    if item.tree in trees.trees:
        return
    trees.write(item.tree, item.ref)
    _json_part(w, parts.DATASET, f"dataset {item.ref}",
               {"ref": item.ref, "name": item.name, "version": item.version, "tree": str(item.tree),
                "message": item.message, "created": item.created, "alone": item.alone})


def _json_part(w: Writer, kind: str, name: str, doc: dict) -> None:
    with w.part(kind, name) as part:
        part.write(json.dumps(doc, sort_keys=True).encode())


def _file_part(w: Writer, kind: str, name: str, path: Path) -> None:
    """A spooled file into a part: msgpack batches as they were spooled, a log a MiB a record."""
    with w.part(kind, name) as part, open(path, "rb") as f:
        if kind == parts.LOG:
            while block := f.read(parts.LOG_RECORD):
                part.write(block)
            return
        unpacker = msgpack.Unpacker(f, raw=False, max_buffer_size=MAX_RECORD)
        for batch in unpacker:
            part.write(parts.pack(batch))


def _ahead(pool: ThreadPoolExecutor, fn, items: list) -> Iterator[tuple[Any, Any]]:
    """``(item, fn(item))`` in order, with up to ``_AHEAD`` calls running ahead on ``pool``."""
    pending: deque = deque()
    it = iter(items)
    for item in it:
        pending.append((item, pool.submit(fn, item)))
        if len(pending) >= _AHEAD:
            break
    while pending:
        item, future = pending.popleft()
        nxt = next(it, None)
        if nxt is not None:
            pending.append((nxt, pool.submit(fn, nxt)))
        yield item, future.result()
