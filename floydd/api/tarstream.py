"""Trees in and out of the API as tar streams, for clients on another machine (FLOYD_HOST).

A client on the daemon's machine names paths (``code_path``, ``dest``) and the daemon reads
or writes them itself; a client elsewhere (a laptop through an SSH tunnel) cannot. These
helpers give the handlers the other way: :func:`received_folder` takes a tar request body
into a private scratch folder (unpacked by :func:`floydd.store.tarball.unpack`, which
trusts nothing in it) for the handler to snapshot, and :func:`send_tree` answers with a
tree as a tar (restored into scratch space first, so a download needs the tree's size free
twice over for as long as it runs). Scratch folders live in ``STATE/uploads`` and are
removed when the request ends, whatever happens.
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
from floydd.errors import InvalidSpec, StoreFull, UserError
from floydd.store import ObjectId
from floydd.store.tarball import Unpacked, pack, unpack

__all__ = ["received_folder", "send_tree", "scratch", "TAR"]

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
async def received_folder(request: web.Request, limit: int | None = None,
                          what: str = "the upload") -> AsyncIterator[tuple[Path, Unpacked]]:
    """The tar body of ``request`` unpacked into a scratch folder: (folder, counts)."""
    if request.content_type not in (TAR, "application/octet-stream"):
        raise InvalidSpec(f"send {what} as {TAR}, not {request.content_type}",
                          hint="floyd does this by itself when FLOYD_HOST is set")
    ceiling = None if limit is None else 2 * limit + (16 << 20)       # tar headers and padding
    too_big = UserError(f"{what} is over {(limit or 0) / 2**20:.0f} MiB", code="code_too_large",
                        hint="move data out of the code folder (floyd data upload) or into .floydignore")
    if ceiling is not None and (request.content_length or 0) > ceiling:
        raise too_big
    async with scratch(request) as work:
        archive = work / "upload.tar"
        with open(archive, "wb") as out:      # the whole body first: unpacking reads a file, not the socket
            async for chunk in request.content.iter_chunked(_CHUNK):
                await asyncio.to_thread(out.write, chunk)
                if ceiling is not None and out.tell() > ceiling:
                    raise too_big
        folder = work / "folder"
        folder.mkdir()

        def unpacked() -> Unpacked:
            with open(archive, "rb") as src:
                return unpack(src, folder, limit)
        got = await asyncio.to_thread(unpacked)
        archive.unlink()
        yield folder, got


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
