"""Open files a CLI on this machine hands to the daemon (``SCM_RIGHTS``), for an export
written straight into the file the person opened and an import read straight from theirs.

The bytes of an export or import then cross no HTTP stream and no second process: the CLI
opens the file as itself (its own permissions decide, as with any file it writes), hands the
descriptor over the socket beside the API's (:func:`floydd.connection.handoff_path`, made
with the API socket's owner, group and mode), and names it in its request by the ticket it
got back. A daemon of another user (a system daemon) writes and reads only through that
descriptor, never a path, so it can reach no file the person could not.

    CLI                                        daemon (this module)
    open(FILE) ── connect, "w" + the fd ──►    checked: one regular file, open for writing
                                               (empty) or reading; the sender's uid
               ◄── "ticket T" ──────────────   kept for :data:`TTL` s, at most
                                               :data:`PER_UID` per uid
    POST /v1/export {"to_ticket": T} ──────►   :meth:`Handoffs.take`: the same uid, the
                                               same mode, once; then the export is written
                                               into it and fsynced

A refusal is one line, ``refused WHY``; the CLI then sends or fetches the file in the
request as before (an older daemon has no such socket at all). Received descriptors are
close-on-exec (``MSG_CMSG_CLOEXEC``), so no job the daemon starts inherits one.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import secrets
import socket
import stat
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from floydd import log
from floydd.api.request import socket_uid
from floydd.errors import Forbidden, UserError

__all__ = ["Handoffs", "HandedFile", "TTL", "PER_UID", "READ", "WRITE"]

TTL = 60.0
"""Seconds a handed file waits for the request that names it."""
PER_UID = 8
"""Files one uid may have waiting at once (each holds a descriptor of the daemon)."""
READ, WRITE = "r", "w"
_HELLO = 16
_IDLE = 5.0
"""Seconds a connection may take to send its file."""


@dataclass(slots=True)
class _Handed:
    fd: int
    uid: int
    mode: str
    expiry: asyncio.TimerHandle | None = None


class Handoffs:
    """The handoff socket at ``path`` and the files waiting on it (one event loop)."""

    def __init__(self, path: Path, *, ttl: float = TTL, per_uid: int = PER_UID) -> None:
        self.path, self.ttl, self.per_uid = Path(path), ttl, per_uid
        self._waiting: dict[str, _Handed] = {}
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conns: set[socket.socket] = set()

    def start(self, *, gid: int | None) -> bool:
        """Listen (owner-only, or ``gid``'s members as the API socket); False where it cannot
        (a path too long for a socket): files then travel in requests."""
        self._loop = asyncio.get_running_loop()
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            log.daemon.info("no handoff socket at %s (%s): exports and imports travel in requests", self.path, exc)
            return False
        finally:
            os.umask(old_umask)
        if gid is not None:
            os.chown(self.path, -1, gid)
            os.chmod(self.path, 0o660)
        sock.listen(16)
        sock.setblocking(False)
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self._accept)
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
            self.path.unlink(missing_ok=True)
        for conn in list(self._conns):
            self._drop(conn)
        for ticket in list(self._waiting):
            self._expire(ticket)

    def take(self, ticket: str, uid: int | None, mode: str) -> HandedFile:
        """The file handed under ``ticket`` by ``uid`` for ``mode`` (once)."""
        handed = self._waiting.get(ticket) if isinstance(ticket, str) else None
        if handed is None:
            raise UserError("the file handed to the daemon is not waiting (it waited over a minute, or was taken)",
                            code="handoff_gone", hint="run the command again")
        if handed.uid != uid or handed.mode != mode:
            raise Forbidden("that file was handed to the daemon by another process or for another use",
                            code="handoff_not_yours", hint="run the command again")
        del self._waiting[ticket]
        if handed.expiry is not None:
            handed.expiry.cancel()
        return HandedFile(handed.fd)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    # -- the socket ----------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:      # out of descriptors: the waiting CLI falls back
                log.daemon.warning("handoff socket: %s", exc)
                return
            conn.setblocking(False)
            self._conns.add(conn)
            self._loop.add_reader(conn.fileno(), self._receive, conn)
            self._loop.call_later(_IDLE, self._drop, conn)

    def _receive(self, conn: socket.socket) -> None:
        try:
            # not socket.recv_fds: Python 3.11's drops its flags, and the descriptors must be close-on-exec
            msg, ancdata, flags, _ = conn.recvmsg(_HELLO, socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        fds: list[int] = []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(data) // 4}i", data[:len(data) - len(data) % 4]))
        try:
            answer = self._keep(conn, msg, fds, flags)
        except _Refused as why:
            for fd in fds:
                os.close(fd)
            answer = f"refused {why}"
        try:
            conn.send(answer.encode() + b"\n")
        except OSError:
            pass
        self._drop(conn)

    def _keep(self, conn: socket.socket, msg: bytes, fds: list[int], flags: int) -> str:
        mode = msg.decode(errors="replace").strip()
        if mode not in (READ, WRITE):
            raise _Refused(f"a file is handed for {READ!r} or {WRITE!r}, not {mode[:20]!r}")
        if len(fds) != 1 or flags & socket.MSG_CTRUNC:
            raise _Refused("hand one file at a time")
        uid = socket_uid(conn)
        if uid is None:
            raise _Refused("who sent it is not known")
        if sum(1 for h in self._waiting.values() if h.uid == uid) >= self.per_uid:
            raise _Refused(f"{self.per_uid} files of yours are waiting already")
        _check(fds[0], mode)
        ticket = secrets.token_hex(16)
        handed = self._waiting[ticket] = _Handed(fds[0], uid, mode)
        handed.expiry = self._loop.call_later(self.ttl, self._expire, ticket)
        return f"ticket {ticket}"

    def _expire(self, ticket: str) -> None:
        handed = self._waiting.pop(ticket, None)
        if handed is not None:
            if handed.expiry is not None:
                handed.expiry.cancel()
            os.close(handed.fd)

    def _drop(self, conn: socket.socket) -> None:
        if conn in self._conns:
            self._conns.discard(conn)
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(conn.fileno())
            conn.close()


class HandedFile:
    """A descriptor taken from the handoffs, owned by whoever :meth:`claim` s it first: the
    worker thread that writes or reads it (and closes it when done), else the request, whose
    end :meth:`close` s it. So no descriptor is closed while a worker still uses it (its number
    could be reused by another file meanwhile), and none is left open."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._lock = threading.Lock()

    def claim(self) -> int:
        """The descriptor, now the caller's to close; raises once the request gave up on it."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None:
            raise UserError("the request was over before its file was used", code="handoff_gone",
                            hint="run the command again")
        return fd

    def close(self) -> None:
        """Close it unless a worker claimed it."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class _Refused(Exception):
    pass


def _check(fd: int, mode: str) -> None:
    """A regular file, open for ``mode``; one to write into must be empty (a new file)."""
    try:
        st = os.fstat(fd)
        access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError as exc:
        raise _Refused(os.strerror(exc.errno or errno.EBADF)) from None
    if not stat.S_ISREG(st.st_mode):
        raise _Refused("not a regular file")
    if mode == WRITE and (access not in (os.O_WRONLY, os.O_RDWR) or st.st_size):
        raise _Refused("not an empty file open for writing")
    if mode == READ and access not in (os.O_RDONLY, os.O_RDWR):
        raise _Refused("not open for reading")
