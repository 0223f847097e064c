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
from floydd.api import keys
from floydd.api.params import check_json, too_deep
from floydd.cluster.state import people
from floydd.errors import FloyddError, Forbidden, InternalError, StoreFull, UserError
from floydd.model import check_abs_path

__all__ = ["body", "typed_body", "convert", "caller", "peer_uid", "acting_person", "acting_user", "ndjson",
           "error_event", "Progress", "check_dest", "api_address", "same_user_only", "restore_into", "reply", "dumps", "PERSON"]

T = TypeVar("T")

PERSON: web.RequestKey[str] = web.RequestKey("floydd.person", str)
"""Request key: the person a remote caller's personal token speaks for (set by
:func:`floydd.api.middleware.auth_middleware` on the TLS API, never from the request's body)."""


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
    uid = peer_uid(request)
    return "" if uid is None else _login(uid) or str(uid)


def peer_uid(request: web.Request) -> int | None:
    """The uid of the process behind the unix socket (SO_PEERCRED); None on TCP."""
    return socket_uid(request.transport.get_extra_info("socket") if request.transport else None)


def socket_uid(sock: socket.socket | None) -> int | None:
    """The uid of the process at the other end of the unix socket ``sock`` (SO_PEERCRED);
    None for another kind of socket, or none."""
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
    except OSError:
        return None
    return uid


def acting_person(request: web.Request, *, required: bool = True) -> str | None:
    """The person an API call is made as (DESIGN 5b "People"), the ``user`` of every change.

    A remote caller's personal token names them (``PERSON``, set by the TLS edge's
    middleware). On the socket, the caller's uid (SO_PEERCRED; on the loopback dev TCP port,
    the daemon's own uid) is mapped to a person on this box (:func:`floydd.cluster.state.people.person_of`:
    from cluster level 3 a login name acts as its person only on the boxes listed for them, so
    a box acts only for the people signed in on it, :mod:`floydd.cluster.state.signin`).
    A lab with no people (a lab of one: the user daemon, whose socket only its user reaches)
    needs no account: the caller's login name is its admin. A caller with no account is
    refused (:class:`Forbidden`) where ``required`` (changes), else None (reads: any local
    caller who reaches the socket may look)."""
    person = request.get(PERSON)
    if person:
        return person
    uid = peer_uid(request)
    uid = os.getuid() if uid is None else uid
    login = _login(uid)
    cluster = request.app.get(keys.CLUSTER)
    ppl = cluster.state.people if cluster is not None else {}
    if not ppl:
        return login or str(uid)
    person = people.person_of(ppl, cluster.node_id, uid, login)
    if person is None and required and login in ppl \
            and not (ppl[login].get("uids") or {}).get(cluster.node_id):   # a person not signed in on this box
        box = cluster.name or cluster.node_id
        raise Forbidden(f"uid {uid} ({login}) does not act as {login} on this box ({box}): {login} is not signed "
                        "in here", code="not_signed_in",
                        hint=f"an admin runs floydd user map {login} {box} (or {login} uses a personal token: floyd login)")
    if person is None and required:
        named = f"uid {uid} ({login})" if login else f"uid {uid}"
        add = f"floydd user add {login}" if login else f"floydd user add NAME --uid {cluster.node_id}:{uid}"
        raise Forbidden(f"{named} has no account in this lab; an admin runs {add}", code="no_account",
                        hint="floydd user list shows the lab's people")
    return person


def _login(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def acting_user(request: web.Request) -> str:
    """:func:`acting_person` (a caller with no account refused): the name 13A's handlers use."""
    return acting_person(request)


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


def api_address(request: web.Request) -> str | None:
    """Where this box serves the TLS API for people elsewhere (``floyd login HOST:PORT``): its
    advertised host when it listens on every address; None: nowhere (a box alone)."""
    remote = request.app.get(keys.REMOTE_API)
    if remote is None:
        return None
    host, port = remote[0], remote[1]
    advertise = request.app[keys.CLUSTER].advertise
    if host in ("0.0.0.0", "::") and advertise:
        host = advertise.rpartition(":")[0]
    return f"{host}:{port}"


def same_user_only(request: web.Request, what: str) -> None:
    """Refuse to read or write a path of this machine that the caller names (``code_path``,
    ``floyd data upload``'s folder, a restore's ``dest``) unless the caller runs as the daemon's
    own user. A system daemon runs as root: reading or writing where a group member says would
    hand them every file of the box. Everyone else sends and gets trees as tars, which the CLI
    does by itself for a daemon whose socket is not its user's (:attr:`floydd.client.Client.remote`)."""
    uid = peer_uid(request)   # None: the loopback dev port (the daemon's user) or TLS (a person)
    if request.get(PERSON) or (uid is not None and uid != os.geteuid()):
        raise Forbidden(f"this daemon reads and writes paths only for its own user, not {what}",
                        code="path_not_yours",
                        hint="update floyd: it sends and fetches files as tars to a daemon of another user")


def check_dest(path: Any, request: web.Request | None = None) -> str:
    """A ``dest`` the daemon restores into itself (:func:`same_user_only` when ``request``)."""
    if request is not None:
        same_user_only(request, "a restore's dest")
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
