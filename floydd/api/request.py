"""Small helpers every handler uses: the JSON body, the caller, NDJSON streams."""

from __future__ import annotations

import asyncio
import errno
import json
import math
import os
import pwd
import socket
import struct
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import msgspec
from aiohttp import web

from floydd import log
from floydd.api.params import check_json, too_deep
from floydd.errors import FloyddError, InternalError, StoreFull, UserError
from floydd.model import check_abs_path

__all__ = ["body", "typed_body", "convert", "caller", "acting_user", "ndjson", "error_event", "Progress", "check_dest",
           "restore_into", "reply", "dumps"]

T = TypeVar("T")


def _finite(value: Any) -> Any:
    """NaN and infinities (a diverged loss) become null: JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """Strict JSON for every answer of the API."""
    try:
        return json.dumps(data, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(data), allow_nan=False)


def reply(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=dumps)


async def body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; a clear 400 for anything else."""
    if not request.can_read_body:
        return {}
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw, parse_constant=_not_json)
    except ValueError as exc:
        raise UserError(f"request body is not valid JSON: {exc}", hint="send a JSON object") from None
    except RecursionError:                  # nested past what the decoder can follow
        raise too_deep() from None
    if not isinstance(data, dict):
        raise UserError("request body must be a JSON object", hint="send {...}, not a list or a value")
    return check_json(data)


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


async def typed_body(request: web.Request, kind: type[T]) -> T:
    """The request's JSON object as a ``kind`` (a dataclass of :mod:`floydd.model`); a wrong
    type or a missing field is a 400 naming the field."""
    return convert(await body(request), kind)


def convert(data: Any, kind: type[T]) -> T:
    """``data`` as a ``kind``, checked by msgspec (types) and by ``kind`` itself (values)."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise UserError(f"request body: {exc}", code="invalid_spec",
                        hint="see /v1/openapi.json for the fields and their types") from None


def caller(request: web.Request) -> str:
    """Who is calling: the unix user behind the socket (SO_PEERCRED), else ``""``."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None or sock.family != socket.AF_UNIX:
        return ""
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
    except OSError:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def acting_user(request: web.Request) -> str:
    """Whom a change is made for (stop, delete, floydd remove): :func:`caller` on the socket;
    on TCP, where the caller holds this daemon's own API token, the daemon's user."""
    return caller(request) or _daemon_user()


def _daemon_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


class Cancelled(Exception):
    """The client went away: the work stops at its next progress report."""


class Progress:
    """Thread-safe progress callback that the stream below turns into events.

    Once ``cancelled`` is set (the caller hung up, e.g. Ctrl-C on ``floyd data
    upload``) the next report raises :class:`Cancelled` in the worker thread, so an
    upload stops before it commits a version; what it stored is reused by a re-run.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, every: float = 0.1) -> None:
        self._loop, self._queue, self._every, self._last = loop, queue, every, 0.0
        self.cancelled = False

    def __call__(self, done: int, total: int) -> None:
        if self.cancelled:
            raise Cancelled("the client went away")
        now = time.monotonic()
        if now - self._last >= self._every or done >= total:
            self._last = now
            self._loop.call_soon_threadsafe(self._queue.put_nowait, {"progress": [done, total]})


async def ndjson(request: web.Request, work: Callable[[Progress], Any],
                 finish: Callable[[Any], Awaitable[dict]] | None = None) -> web.StreamResponse:
    """Run blocking ``work(progress)`` in a thread, streaming progress events, then its result.

    The result event is ``finish(result)`` (or ``{"result": result}``); an error
    becomes a final ``{"error": ...}`` event, since the status line is already sent.
    Either is the stream's end record: a client takes a stream without one as cut
    short (the daemon died), never as complete.
    """
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    queue: asyncio.Queue = asyncio.Queue()
    progress = Progress(asyncio.get_running_loop(), queue)
    task = asyncio.create_task(asyncio.to_thread(work, progress))
    try:
        while not task.done() or not queue.empty():
            getter = asyncio.create_task(queue.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                await resp.write(dumps(getter.result()).encode() + b"\n")
            else:
                getter.cancel()
        try:
            result = task.result()
            event = await finish(result) if finish else {"result": result}
        except Exception as exc:  # reported as JSON: no traceback reaches the user
            event = error_event(exc)
        await resp.write(dumps(event).encode() + b"\n")
    except (ConnectionError, asyncio.CancelledError) as exc:
        progress.cancelled = True  # the client went away: stop the work at its next report
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if isinstance(exc, asyncio.CancelledError):
            raise
        log.api.info("%s %s: the client went away; stopping the work", request.method, request.path)
        return resp
    await resp.write_eof()
    return resp


def error_event(exc: Exception) -> dict:
    """The ``{"error": ...}`` end record of a stream that failed after its status line went
    out; anything but a :class:`FloyddError` is a bug, logged with its traceback here."""
    if isinstance(exc, FloyddError):
        return exc.to_payload()
    log.api.error("streamed request failed", exc_info=exc)
    return InternalError(f"internal error: {type(exc).__name__}: {exc}",
                         hint="this is a bug; see the daemon log").to_payload()


def check_dest(path: Any) -> str:
    return check_abs_path(path, "dest", hint="the CLI sends an absolute path; pass one")


def restore_into(store, tree, dest: str, progress: Progress) -> None:
    """``store.restore(tree, dest)``, where a dest the daemon cannot write (its parent not
    creatable, e.g. under /proc) is the caller's mistake, said as such, not a bug."""
    try:
        store.restore(tree, Path(dest), progress=progress)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFull(f"no space left on the device of {dest}", hint="free disk space there, or restore "
                                                                           "somewhere else") from None
        raise UserError(f"cannot restore into {dest}: {exc.strerror or exc}",
                        hint="choose a folder the daemon's user can create and write") from None
