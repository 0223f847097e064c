"""``/v1/export`` and ``/v1/import``: export files between sites (:mod:`floydd.exchange`).

Both stream: an export answers with the file itself (``application/octet-stream``) as it is
written, an import reads the file from the request body as it arrives; neither holds it in
memory nor on this box's disk (only a job's records are spooled, one job at a time). The
export key travels in the JSON body of an export and in the ``Floydd-Export-Key`` header of
an import (never in a URL, which access logs keep); the CLI makes it, or derives it from a
passphrase, and prints it: the daemon never stores it.

An export finds everything before its status line (a job still running, a box away, a
private dataset: a JSON error, as any request); a failure after that (a disk error midway)
ends the file with an error record (:func:`~floydd.bundle.container.error_frame`) that the
client raises, never with a file that looks complete. Into a handed file, only what refuses
the export is found first (:func:`~floydd.exchange.export.find`): the jobs' records are
gathered while the datasets are written (:class:`~floydd.exchange.export.JobFeed`), so a box
that ran one and is away ends the progress events with that error instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os

from aiohttp import web

from floydd.api import keys
from floydd.api.params import text_field
from floydd.api.handedio import FileIn, FileOut
from floydd.api.handoff import READ, WRITE, HandedFile
from floydd.api.request import Progress, acting_user, body, error_event, ndjson, peer_uid, reply
from floydd.api.tarstream import scratch
from floydd.bundle import ExportKey
from floydd.bundle.container import error_frame
from floydd.errors import InvalidSpec, UserError
from floydd.exchange import check_kdf
from floydd.exchange.commit import commit
from floydd.exchange.export import JobFeed, find, gather, write
from floydd.exchange.stage import stage

routes = web.RouteTableDef()

OCTET = "application/octet-stream"
KEY_HEADER = "Floydd-Export-Key"
TICKET_HEADER = "Floydd-File-Ticket"
"""An import's file, handed over by a local CLI (:mod:`floydd.api.handoff`)."""
SIZE_HEADER = "Floydd-Export-Size"
"""About how many bytes the export will be (for a progress bar; not a Content-Length)."""
_SMALL = 64 << 10
_HANDOFF = 4 << 20
"""Bytes handed from the writing thread to the loop at a time (each hand-off is a trip)."""
_MAX_NAMES = 10_000


@routes.post("/v1/export")
async def export(request: web.Request) -> web.StreamResponse:
    """``{"jobs": [PROJECT or PROJECT/N], "datasets": [NAME[:N]], "key": hex, "kdf"}`` -> the file;
    with ``"to_ticket"`` (a file a local CLI handed over, :mod:`floydd.api.handoff`) it is
    written and fsynced there instead, and the answer is NDJSON progress events, then
    ``{"result": {"bytes": N}}``."""
    data = await body(request)
    person = acting_user(request)
    key = ExportKey.from_text(text_field(data, "key", limit=200, hint="floyd export sends the key it made"))
    kdf = check_kdf(data.get("kdf"))
    selection, refs = _names(data, "jobs"), _names(data, "datasets")
    jobs, cluster = request.app[keys.JOBS], request.app[keys.CLUSTER]
    handed = _handed(request, data.get("to_ticket"), WRITE)

    def run(out, buffers=bytearray) -> None:
        write(plan, store=jobs.store, out=out, buffers=buffers, key=key, kdf=kdf, identity=cluster.identity,
              exported_by=person, box=cluster.name)
    try:
        async with scratch(request, "exchange", "; nothing was imported or exported") as spool:
            if handed is None:
                plan = await gather(jobs=jobs, datasets=jobs.datasets, selection=selection, refs=refs,
                                    person=person, spool=spool)
                return await _streamed(request, plan.estimate, run)
            plan = await find(jobs=jobs, datasets=jobs.datasets, selection=selection, refs=refs, person=person)

            def into_file(progress: Progress) -> dict:
                out = FileOut(handed.claim(), lambda done: progress(done, max(done, plan.estimate)))
                try:
                    try:
                        run(out, out.buffer)
                    except BaseException:
                        with contextlib.suppress(OSError):
                            out.close(sync=False)
                        raise
                    out.close(sync=True)
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise UserError("no space left on the device of the export file; what was written of it "
                                        "is not usable", code="no_space", hint="free space there, or export elsewhere"
                                        ) from None
                    raise
                finally:
                    os.close(out.fd)
                return {"bytes": out.position}
            plan.jobs = feed = JobFeed(jobs, plan, spool)     # gathered while the datasets are written
            try:
                return await ndjson(request, into_file)
            finally:
                await feed.aclose()
    finally:
        if handed is not None:
            handed.close()


async def _streamed(request: web.Request, estimate: int, run) -> web.StreamResponse:
    """The file as the answer, as ``run(out)`` writes it in a worker thread."""
    resp = web.StreamResponse(headers={"Content-Type": OCTET, SIZE_HEADER: str(estimate)})
    await resp.prepare(request)
    pipe = _Pipe(asyncio.get_running_loop())

    def streamed() -> None:
        try:
            run(pipe)
        finally:
            pipe.close()
    task = asyncio.create_task(asyncio.to_thread(streamed))
    try:
        while (blocks := await pipe.get()) is not None:
            for block in blocks:
                await resp.write(block)
    except BaseException:
        pipe.broken = True              # the client went away: the writer stops at its next write
        await pipe.drain()
        await asyncio.gather(task, return_exceptions=True)
        raise
    try:
        await task
    except Exception as exc:        # after the status line: the file ends with why
        await resp.write(error_frame(error_event(exc)))
    await resp.write_eof()
    return resp


@routes.post("/v1/import")
async def import_(request: web.Request) -> web.StreamResponse:
    """The file as the body (``Floydd-Export-Key``: the key as hex); what it made (201). Or
    handed over by a local CLI (``Floydd-File-Ticket``, :mod:`floydd.api.handoff`; no body):
    then progress events as the daemon reads it, and what it made."""
    person = acting_user(request)
    handed = _handed(request, request.headers.get(TICKET_HEADER), READ)
    try:
        if handed is None and request.content_type != OCTET:
            raise InvalidSpec(f"send the export file as {OCTET}, not {request.content_type}",
                              hint="floyd import FILE")
        key = ExportKey.from_text(request.headers.get(KEY_HEADER, ""))
        name = text_field(request.query, "name", limit=200, hint="the file's name, for messages") or "the export"
        expect = text_field(request.query, "expect_origin", limit=80, hint="a CA fingerprint (hex)") or None
        jobs = request.app[keys.JOBS]
        async with scratch(request, "exchange", "; nothing was imported or exported") as spool:
            if handed is None:
                src = _Body(request.content, asyncio.get_running_loop())
                staged = await asyncio.to_thread(stage, src, key, store=jobs.store, spool=spool, where=name,
                                                 expect_origin=expect)
                return reply(await commit(staged, jobs=jobs, person=person), status=201)

            def staging(progress: Progress):
                fd = handed.claim()
                try:
                    return stage(FileIn(fd, progress), key, store=jobs.store, spool=spool, where=name,
                                 expect_origin=expect)
                finally:
                    os.close(fd)

            async def committed(staged) -> dict:
                return {"result": await commit(staged, jobs=jobs, person=person)}
            return await ndjson(request, staging, committed)
    finally:
        if handed is not None:
            handed.close()


def _handed(request: web.Request, ticket: object, mode: str) -> HandedFile | None:
    """The file a local CLI handed over under ``ticket`` (None: none named)."""
    if ticket is None:
        return None
    handoffs = request.app.get(keys.HANDOFFS)
    if handoffs is None:
        raise UserError("this daemon takes no handed files here", code="handoff_gone",
                        hint="send the file in the request (an up-to-date floyd does so by itself)")
    return handoffs.take(ticket, peer_uid(request), mode)


def _names(data: dict, field: str) -> list[str]:
    value = data.get(field) or []
    if not isinstance(value, list) or len(value) > _MAX_NAMES or not all(isinstance(v, str) and v for v in value):
        raise UserError(f"{field} must be a list of names", hint="floyd export PROJECT[/N] ... --to FILE")
    return value


class _Pipe:
    """A file a worker thread writes and the loop reads: small writes gathered, large ones (a
    sealed record) passed on as they are, 4 MiB a hand-off, 16 MiB in flight at most."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=4)
        self._small = bytearray()
        self._blocks: list[bytes] = []
        self._size = 0
        self.broken = False

    def write(self, data) -> None:
        if self.broken:
            raise ConnectionResetError("the client went away")
        if len(data) < _SMALL:
            self._small += data
        else:
            self._flush_small()
            self._blocks.append(data)       # a record's frame: the writer does not touch it again
            self._size += len(data)
        if self._size + len(self._small) >= _HANDOFF:
            self._flush_small()
            self._put(self._blocks)
            self._blocks, self._size = [], 0

    def close(self) -> None:
        if not self.broken:
            self._flush_small()
            if self._blocks:
                self._put(self._blocks)
        self._blocks, self._small = [], bytearray()
        self._put(None)

    def _flush_small(self) -> None:
        if self._small:
            self._blocks.append(bytes(self._small))
            self._size += len(self._small)
            self._small.clear()

    def _put(self, blocks: list[bytes] | None) -> None:
        asyncio.run_coroutine_threadsafe(self._queue.put(blocks), self._loop).result()

    async def get(self) -> list[bytes] | None:
        return await self._queue.get()

    async def drain(self) -> None:
        """Take what is queued until the writer closed (it stops at its next write)."""
        while await self._queue.get() is not None:
            pass


class _Body:
    """The request body as a blocking ``read`` for a worker thread (the reader asks a MiB at a time)."""

    def __init__(self, content, loop: asyncio.AbstractEventLoop) -> None:
        self._content, self._loop = content, loop

    def read(self, n: int) -> bytes:
        return asyncio.run_coroutine_threadsafe(self._read(n), self._loop).result()

    async def _read(self, n: int) -> bytes:
        """``n`` bytes (fewer only at the end): one trip to the loop a MiB, not one a socket read."""
        pieces, got = [], 0
        while got < n:
            piece = await self._content.read(n - got)
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)
