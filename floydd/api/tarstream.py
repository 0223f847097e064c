"""Trees in and out of the API as tar streams, for clients on another machine (FLOYD_HOST).

A client on the daemon's machine names paths (``code_path``, ``dest``) and the daemon reads
or writes them itself; a client elsewhere (a laptop through an SSH tunnel) cannot. These
helpers give the handlers the other way: :func:`received_folder` takes a tar request body
into a private scratch folder (unpacked by :func:`floydd.store.tarball.unpack`, which
trusts nothing in it) for the handler to snapshot, and :func:`send_tree` answers with a
tree as a tar (restored into scratch space first, so a download needs the tree's size free
twice over for as long as it runs). Scratch folders live in ``STATE/uploads`` and are
removed when the request ends, whatever happens.

Every upload has a size limit, counted on what unpacking would write (sparse members at their
expanded size: :class:`~floydd.store.tarball.SizeLimit`): a code folder ``max_code_mb``, a
dataset ``max_upload_gb``. The body itself may be at most about twice the limit (tar headers
and padding); past either the answer is 413 naming the limit and its setting, and nothing past
the limit is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import shutil
import tempfile
from pathlib import Path
from typing import AsyncIterator

from aiohttp import web

from floydd.api import keys
from floydd.errors import InvalidSpec, StoreFull
from floydd.store import ObjectId
from floydd.store.tarball import SizeLimit, Unpacked, pack, unpack

__all__ = ["received_folder", "send_tree", "scratch", "dataset_limit", "TAR"]

TAR = "application/x-tar"
_CHUNK = 1 << 20


@contextlib.asynccontextmanager
async def scratch(request: web.Request, folder: str = "uploads",
                  what: str = "for the transfer") -> AsyncIterator[Path]:
    """A fresh folder under ``STATE/folder`` for one request, removed after; a full disk while
    it is used is :class:`StoreFull` saying where (``what``: what did not happen)."""
    root = request.app[keys.CONFIG].state_dir / folder
    root.mkdir(mode=0o700, exist_ok=True)
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, dir=root))
    try:
        yield work
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFull(f"no space left in {root} on this box {what}",
                            hint="free disk space on the box (floyd data gc helps) and try again") from None
        raise
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


@contextlib.asynccontextmanager
async def received_folder(request: web.Request, limit: int | SizeLimit | None = None,
                          what: str = "the upload") -> AsyncIterator[tuple[Path, Unpacked]]:
    """The tar body of ``request`` unpacked into a scratch folder: (folder, counts).

    ``limit``: what unpacking may write; a number of bytes is a code folder's (``max_code_mb``),
    None a dataset's (``max_upload_gb`` of the daemon's config, :func:`dataset_limit`)."""
    if request.content_type not in (TAR, "application/octet-stream"):
        raise InvalidSpec(f"send {what} as {TAR}, not {request.content_type}",
                          hint="floyd does this by itself when FLOYD_HOST is set")
    if limit is None:
        limit = dataset_limit(request.app[keys.CONFIG].max_upload_gb, what)
    elif isinstance(limit, int):
        limit = SizeLimit(limit, what=what)
    ceiling = None if limit is None else 2 * limit.bytes + (16 << 20)       # tar headers and padding
    if ceiling is not None and (request.content_length or 0) > ceiling:
        raise limit.refusal(f"is sent as {request.content_length:,} bytes of tar")
    async with scratch(request) as work:
        archive = work / "upload.tar"
        with open(archive, "wb") as out:      # the whole body first: unpacking reads a file, not the socket
            async for chunk in request.content.iter_chunked(_CHUNK):
                await asyncio.to_thread(out.write, chunk)
                if ceiling is not None and out.tell() > ceiling:
                    raise limit.refusal(f"is sent as more than {ceiling:,} bytes of tar")
        folder = work / "folder"
        folder.mkdir()

        def unpacked() -> Unpacked:
            with open(archive, "rb") as src:
                return unpack(src, folder, limit)
        got = await asyncio.to_thread(unpacked)
        archive.unlink()
        yield folder, got


def dataset_limit(gib: float, what: str = "the dataset") -> SizeLimit | None:
    """The limit of a dataset sent as a tar: ``max_upload_gb`` GiB (0: none)."""
    if not gib:
        return None
    return SizeLimit(int(gib * 2**30), setting="max_upload_gb", what=what, code="upload_too_large",
                     hint="split it into smaller datasets (a job mounts several: --data A:/a --data B:/b)")


async def send_tree(request: web.Request, tree: ObjectId, *, prepare=None) -> web.StreamResponse:
    """Answer with ``tree`` as a tar; ``prepare()`` (in a thread) first brings it here if needed."""
    store = request.app[keys.STORE]
    async with scratch(request) as work:
        folder, archive = work / "tree", work / "tree.tar"

        def build() -> None:
            if prepare is not None:
                prepare()
            store.restore(tree, folder)
            with open(archive, "wb") as out:
                pack(folder, out, ignore=False)
        await asyncio.to_thread(build)
        resp = web.StreamResponse(headers={"Content-Type": TAR, "Content-Length": str(archive.stat().st_size)})
        await resp.prepare(request)
        with open(archive, "rb") as src:
            while chunk := await asyncio.to_thread(src.read, _CHUNK):
                await resp.write(chunk)
        await resp.write_eof()
        return resp
