"""Run one daemon in the foreground: lock the state dir, serve the API, stop cleanly.

The API listens on a unix socket in the state dir (owner-only: the folder is
0700 and the socket 0600) and, when asked, on a loopback TCP port that needs the
token in ``STATE/api-token``. A second daemon on the same state dir refuses to
start: the first holds an exclusive ``flock`` on ``STATE/floydd.lock``.

A state dir too deep for a socket path puts the socket in a folder under the temp
dir, a place every local user can write: the daemon makes that folder itself (0700)
and refuses one it did not make (:mod:`floydd.security.owned_dirs`), and it refuses a
state dir or lock file that another user made first.

A system daemon (``floydd start --system``, :mod:`floydd.system`) puts its socket in
``/run/floydd`` instead: the folder 0750 and the socket 0660, both of group ``floyd``
(``socket_group``), so the group's members reach it and nobody else does.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import os
import secrets
import signal

from aiohttp import web

from floydd import log
from floydd.api import keys
from floydd.api.badhttp import ApiRunner
from floydd.api.handoff import Handoffs
from floydd.daemon import logs, malloc
from floydd.daemon.app import create_app
from floydd.daemon.ports import start_site
from floydd.config import Config
from floydd.connection import handoff_path
from floydd.errors import Conflict, UserError
from floydd.security.owned_dirs import (claim_state_dir, ensure_group_dir, ensure_owned_dir, is_shared_socket,
                                        open_private_file, socket_folder_hint)

__all__ = ["run", "StateLock", "api_token"]


class StateLock:
    """Exclusive ownership of a state dir for the life of the process."""

    def __init__(self, config: Config) -> None:
        self.path = config.lock_path
        self._fd: int | None = None

    def acquire(self) -> None:
        claim_state_dir(self.path.parent)
        fd = open_private_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise Conflict(f"another floydd (pid {other}) is already running on {self.path.parent}",
                           hint="use that one (`floydd status`), stop it first, or pick another --state-dir") \
                from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def api_token(config: Config) -> str:
    """The bearer token TCP clients must send; made on first use, owner-only."""
    path = config.state_dir / "api-token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token


def _tcp_address(config: Config) -> tuple[str, int]:
    host, _, port = config.dev_tcp.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        if not ipaddress.ip_address("127.0.0.1" if host == "localhost" else host).is_loopback:
            raise ValueError
        return host, int(port)
    except ValueError:
        raise UserError(f"--dev-tcp {config.dev_tcp!r} must be a loopback HOST:PORT, e.g. 127.0.0.1:7654",
                        hint="people on other machines use the TLS API of a cluster's box: floyd login") from None


async def serve(config: Config, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (used by :func:`run` and by in-process tests)."""
    claim_state_dir(config.state_dir)
    sock_path = config.socket_path
    gid = _socket_gid(config)
    if is_shared_socket(sock_path):     # before anything starts: a refusal touches nothing
        ensure_owned_dir(sock_path.parent, hint=socket_folder_hint(sock_path.parent))
    elif config.socket:                 # a system daemon's /run/floydd, or a socket named in the config
        sock_path.parent.parent.mkdir(parents=True, exist_ok=True)
        hint = f"remove {sock_path.parent} (as root) and start floydd again: it makes the folder itself"
        if gid is None:
            ensure_owned_dir(sock_path.parent, hint=hint)
        else:
            ensure_group_dir(sock_path.parent, gid, hint=hint)
    app = create_app(config)
    app[keys.HANDOFFS] = handoffs = Handoffs(handoff_path(sock_path))
    runner = ApiRunner(app, handle_signals=False, access_log=None)      # malformed HTTP answered in JSON too
    bound = False
    try:
        await runner.setup()            # a refusal here (a busy --listen port) still cleans up
        sock_path.unlink(missing_ok=True)  # stale: we hold the lock
        old_umask = os.umask(0o177)
        try:
            await web.UnixSite(runner, str(sock_path)).start()
            bound = True
        finally:
            os.umask(old_umask)
        if gid is None:
            os.chmod(sock_path, 0o600)
        else:                           # members of the group reach it; SO_PEERCRED says who they are
            os.chown(sock_path, -1, gid)
            os.chmod(sock_path, 0o660)
        handoffs.start(gid=gid)         # beside it, as it: open files from local CLIs
        if config.dev_tcp:
            host, port = _tcp_address(config)
            app[keys.TCP_TOKEN] = api_token(config)
            await start_site(web.TCPSite(runner, host, port), setting="--dev-tcp", host=host, port=port)
            log.daemon.info("dev API also on http://%s:%d (token in %s)", host, port, config.state_dir / "api-token")
        remote = app.get(keys.REMOTE_API)
        if remote is not None:          # a box of a cluster: people elsewhere, with personal tokens
            host, port, ctx = remote
            await start_site(web.TCPSite(runner, host, port, ssl_context=ctx), setting="api_listen",
                             host=host, port=port, set_in=str(config.state_dir / "cluster.json"))
            log.daemon.info("API for people elsewhere on https://%s:%d (floyd login)", host, port)
        log.daemon.info("floydd %s serving on %s (state %s)", config.node_name, sock_path, config.state_dir)
        if ready is not None:
            ready.set()
        malloc.trim()                   # what start-up freed, back to the system (floydd.daemon.malloc)
        await stop.wait()
    finally:
        handoffs.close()
        await runner.cleanup()
        if bound:
            sock_path.unlink(missing_ok=True)


def _socket_gid(config: Config) -> int | None:
    """The gid of ``socket_group`` (None: an owner-only socket); a missing group is refused."""
    if not config.socket_group:
        return None
    import grp
    try:
        return grp.getgrnam(config.socket_group).gr_gid
    except KeyError:
        raise UserError(f"the group {config.socket_group!r} for the API socket does not exist",
                        hint=f"create it (groupadd --system {config.socket_group}) and add the lab's people "
                             f"to it (usermod -aG {config.socket_group} NAME), or set socket_group") from None


def run(config: Config) -> None:
    """``floydd start``: the daemon in the foreground until SIGINT/SIGTERM.

    Its log goes to the journal (a service), or to ``STATE/floydd.log``, rotated
    (:mod:`floydd.daemon.logs`); set up once the lock is held, so only this daemon rotates it.
    SIGTERM stops the daemon alone: jobs' agents run in sessions of their own and carry on
    (a service unit has ``KillMode=process`` for the same reason, packaging/units/)."""
    lock = StateLock(config)
    lock.acquire()
    try:
        logs.setup(config)

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await serve(config, stop)
        asyncio.run(main())
    finally:
        lock.release()
