"""Export and import between sites: projects, jobs and datasets as one signed, verified file.

``floyd export PROJECT[/N…] --to FILE`` (and ``floyd data export NAME[:N]``) writes one file;
``floyd import FILE`` on another cluster (another store secret, perhaps never connected to
the first) checks it and adds the jobs under the same project names with new numbers and a
note of their origin. Decisions, and why (the module that holds each)::

    format      bundle      the file framed, sealed and signed (:mod:`floydd.bundle`:
                            container, reader, crypto, signing); the CLI loads it alone to
                            check a file and make its key, never what follows here
    what        parts       records (params, metrics, events, samples, logs), code trees,
                            outputs and the dataset versions the jobs mounted, each chunk once
    export      export      gather on the loop (peers' records, trees made local), then one
                            writing pass over the store in a thread
    import      stage       verify everything while staging it (objects under this store's
                            key, trees pinned, records spooled): nothing visible yet
                commit      idempotent steps keyed by (origin fingerprint, original id): new
                            dataset versions, job numbers, records, then the jobs, finished,
                            never run; a re-import adds nothing, an import cut short is
                            finished by importing the file again

What is readable without the key: the table of contents (part names: project, job and
dataset names; sizes; the origin's name and certificates). Everything else (params, metrics,
logs, code, data) is sealed. Measured against ``tar | zstd`` of the same files in
``bench/exchange.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import IO, Any, Iterable

from floydd.bundle import ExportKey

__all__ = ["export_to", "import_from", "check_kdf"]


async def export_to(out: IO[bytes], *, jobs: Any, selection: Iterable[str] = (), refs: Iterable[str] = (),
                    person: str, key: ExportKey, kdf: dict, spool: Path) -> dict:
    """Export the jobs ``selection`` names and the dataset versions ``refs`` to ``out``, for
    ``person``, through this node's :class:`~floydd.jobs.service.JobService`; the manifest."""
    from floydd.exchange.export import gather, write
    plan = await gather(jobs=jobs, datasets=jobs.datasets, selection=selection, refs=refs, person=person, spool=spool)
    cluster = jobs.cluster
    return await asyncio.to_thread(write, plan, store=jobs.store, out=out, key=key, kdf=check_kdf(kdf),
                                   identity=cluster.identity, exported_by=person, box=cluster.name)


async def import_from(src: IO[bytes], *, jobs: Any, key: ExportKey, person: str, spool: Path,
                      where: str = "the export", expect_origin: str | None = None) -> dict:
    """Verify and stage all of ``src``, then commit it for ``person``; what it made."""
    from floydd.exchange.commit import commit
    from floydd.exchange.stage import stage
    staged = await asyncio.to_thread(stage, src, key, store=jobs.store, spool=spool, where=where,
                                     expect_origin=expect_origin)
    return await commit(staged, jobs=jobs, person=person)


def check_kdf(kdf: object) -> dict:
    """The header's key setting as a client gave it: ``{"kind": "random"}`` or scrypt's."""
    from floydd.errors import InvalidSpec
    if kdf in (None, {}):
        return {"kind": "random"}
    if isinstance(kdf, dict) and kdf.get("kind") == "random" and len(kdf) == 1:
        return {"kind": "random"}
    if isinstance(kdf, dict) and kdf.get("kind") == "scrypt" and set(kdf) == {"kind", "salt", "n", "r", "p"} \
            and isinstance(kdf["salt"], str) and len(kdf["salt"]) == 32 \
            and all(isinstance(kdf[k], int) and not isinstance(kdf[k], bool) for k in ("n", "r", "p")):
        return dict(kdf)
    raise InvalidSpec("kdf is {\"kind\": \"random\"} or {\"kind\": \"scrypt\", \"salt\", \"n\", \"r\", \"p\"}",
                      hint="floyd export sends it; use the CLI")
