"""``floyd import``, first step: read and verify the whole file, staging what it holds.

One pass over the file as it arrives (a pipe, an HTTP body), in a worker thread, in bounded
memory. Every record is authenticated under the export key as it is read (:mod:`.container`);
each chunk is sealed under *this* store's key and written (a store upload: written, read back,
checked, fsynced, :class:`~floydd.store.objects.Writer`); each tree is validated as hostile
input (:meth:`Tree.decode <floydd.store.tree.Tree.decode>`), its chunk ids rewritten to this
store's and stored, and pinned under an upload lease; job documents are kept, their records
and logs spooled to a scratch folder. The file is only trusted once its trailer checks out
(the manifest lists exactly the parts read, its MAC, its signature): then :mod:`.commit`
makes it visible. Until then nothing is: objects no catalog names are invisible (gc removes
them), and a failed stage drops its leases.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from floydd.errors import FloyddError, StoreFull
from floydd.exchange import parts
from floydd.bundle.container import Damaged, NotAnExport
from floydd.bundle.reader import Reader
from floydd.bundle.crypto import ExportKey
from floydd.bundle.signing import Origin
from floydd.store.catalog import UPLOAD_LEASE_S
from floydd.store.ids import ID_SIZE, ObjectId
from floydd.store.tree import Tree

__all__ = ["Staged", "StagedJob", "StagedTree", "stage", "LEASE"]

LEASE = "upload:import-"
"""The holder prefix of the pins that keep staged trees until a version or a job pins them
(``upload:`` leases are dropped by the version added for their tree, as a snapshot's are)."""


@dataclass(frozen=True, slots=True)
class StagedTree:
    tree: ObjectId          # its id in this store
    size: int
    files: int


@dataclass(slots=True)
class StagedJob:
    doc: dict
    folder: Path            # metrics, samples, events (msgpack batches) and log, spooled


@dataclass(slots=True)
class Staged:
    origin: Origin
    manifest: dict
    trees: dict[str, StagedTree] = field(default_factory=dict)      # source tree id (hex) -> here
    datasets: list[dict] = field(default_factory=list)
    jobs: list[StagedJob] = field(default_factory=list)
    leases: list[str] = field(default_factory=list)
    bytes_read: int = 0


def stage(src: IO[bytes], key: ExportKey, *, store: Any, spool: Path, where: str = "the export",
          expect_origin: str | None = None) -> Staged:
    """Read all of ``src`` (see the module docstring); ``expect_origin``: refuse a file signed by
    any other cluster (a fingerprint, or its first 16 hex digits)."""
    reader = Reader(src, key, where=where)
    run = _Run(store, spool, where, secrets.token_hex(6))
    try:
        # a whole site's data, not read at once: written past the page cache (direct I/O;
        # issue 23, bench/exchange.py: import 0.71x zstd -d | tar x through it, 1.04-1.15x past it)
        with store.writing(direct=True) as writer:
            run.writer = writer
            for part in reader.parts():
                run.part(part)
            origin = reader.origin
            if expect_origin and not origin.fingerprint.removeprefix("box:").startswith(expect_origin.lower()):
                raise Damaged(f"{where} was made by {origin.describe()}, not by the origin you expected "
                              f"({expect_origin[:20]})", code="unexpected_origin",
                              hint="check with the exporting site which cluster made the file")
    except BaseException as exc:
        for holder in run.leases:
            try:
                store.catalog.unpin(holder)
            except FloyddError:             # a full disk: the lease expires by itself in a day
                pass
        if isinstance(exc, StoreFull):
            raise StoreFull(f"{exc.message}; nothing was imported", hint=exc.hint) from None
        raise
    return Staged(origin=origin, manifest=reader.manifest, trees=run.trees, datasets=run.datasets, jobs=run.jobs,
                  leases=run.leases, bytes_read=reader.position)


class _Run:
    def __init__(self, store: Any, spool: Path, where: str, token: str) -> None:
        self.store, self.spool, self.where, self.token = store, spool, where, token
        self.writer: Any = None
        self.chunks: dict[bytes, ObjectId] = {}
        self.trees: dict[str, StagedTree] = {}
        self.datasets: list[dict] = []
        self.jobs: list[StagedJob] = []
        self.leases: list[str] = []

    def part(self, part) -> None:
        kind = part.kind
        if kind == parts.DATA:
            for view in part.views():          # put() seals it before the next is read
                if len(view) < ID_SIZE:
                    raise self._bad(part, "a chunk record is too short")
                self.chunks[bytes(view[:ID_SIZE])] = self.writer.put(view[ID_SIZE:])
        elif kind == parts.TREE:
            self._tree(part)
        elif kind == parts.DATASET:
            doc = self._json(part)
            if doc.get("tree") not in self.trees:
                raise self._bad(part, "it names a tree the file holds nowhere before it")
            self.datasets.append(doc)
        elif kind == parts.JOB:
            doc = self._json(part)
            if not isinstance(doc.get("id"), str) or part.name != f"job {doc['id']}":
                raise self._bad(part, "its job is not the one its name says")
            folder = self.spool / f"job-{len(self.jobs)}"
            folder.mkdir(parents=True)
            self.jobs.append(StagedJob(doc=doc, folder=folder))
        elif kind in (parts.METRICS, parts.SAMPLES, parts.EVENTS, parts.LOG):
            job = self.jobs[-1] if self.jobs else None
            if job is None or part.name != f"{kind} of {job.doc['id']}":
                raise self._bad(part, "it does not follow its job")
            with open(job.folder / kind, "wb") as out:
                for record in part.views():
                    out.write(record)
        else:
            raise NotAnExport(f"{self.where} holds a part of a kind this floyd does not know ({kind[:40]!r}, "
                              f"{part.label})", hint="import it with the floyd version that made it, or a newer one")

    def _tree(self, part) -> None:
        records = part.records()
        first = next(records, b"")
        if len(first) != ID_SIZE:
            raise self._bad(part, "it does not start with its tree's id")
        raw = b"".join(records)
        tree = Tree.decode(raw, name=f"the {part.name} in {self.where}")     # untrusted: every rule checked
        entries = []
        for e in tree.entries:
            try:
                entries.append(dataclasses.replace(e, chunks=tuple(self.chunks[c.raw] for c in e.chunks)))
            except KeyError:
                raise self._bad(part, f"{e.path[:200]} names a chunk the file holds nowhere before it") from None
        new = self.writer.put(Tree(tuple(entries)).encode())
        holder = f"{LEASE}{self.token}-{new.hex[:16]}"
        self.store.catalog.pin(new, holder, ttl_s=UPLOAD_LEASE_S)
        self.leases.append(holder)
        self.trees[first.hex()] = StagedTree(new, tree.size, tree.files)

    def _json(self, part) -> dict:
        data = b"".join(part.records())
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise self._bad(part, "it is not a document")
        return doc

    def _bad(self, part, why: str) -> Damaged:
        return Damaged(f"{self.where} is malformed in {part.label}: {why}",
                       hint="the file was not written by floyd export (or by a version with a bug)")
