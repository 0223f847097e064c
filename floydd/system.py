"""System mode: where a daemon installed as a service lives, and how the CLI finds a daemon.

A service install (``floydd start --system``, or ``system = true``) keeps::

    ROOT/etc/floydd/floydd.toml    its config (a user daemon reads STATE/floydd.toml)
    ROOT/var/lib/floydd            its state, 0700, the daemon's user
    ROOT/run/floydd/floydd.sock    its API socket, 0660 in a folder 0750, group ``floyd``:
                                   members of the group reach it, the kernel tells the daemon
                                   who they are (SO_PEERCRED)

``ROOT`` is ``/``; ``FLOYDD_SYSTEM_ROOT`` moves all three under another folder, so tests run a
system daemon without touching the real /var. ``FLOYDD_SYSTEM_GROUP`` names another group.

The CLI looks for a daemon in DESIGN §5's order (:func:`discover`): ``FLOYD_HOST``, the user's
own socket, the system socket; only when none answers does it start a user daemon, and never
silently on a box whose service is installed but stopped (:func:`service_installed`): there it
says so, unless ``FLOYD_USER_DAEMON=1`` asks for a user daemon anyway. Everything here is pure
(paths and an environment in, a decision out) so the order has its own unit tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["SystemPaths", "system_paths", "job_account", "service_installed", "discover", "Found", "SERVICE_DOWN",
           "SERVICE_DOWN_HINT", "USER_DAEMON_ENV", "DEFAULT_GROUP"]

DEFAULT_GROUP = "floyd"
USER_DAEMON_ENV = "FLOYD_USER_DAEMON"
"""Set to 1: start (or use) a user daemon even though a system service is installed here."""
SERVICE_DOWN = "the floydd service is down: sudo systemctl start floydd"
SERVICE_DOWN_HINT = (f"floydd is installed as a service on this box; ask its admin to start it, or set "
                     f"{USER_DAEMON_ENV}=1 to run a daemon of your own instead")


@dataclass(frozen=True, slots=True)
class SystemPaths:
    """The folders of a service install under ``root``."""

    root: Path
    group: str = DEFAULT_GROUP

    @property
    def state_dir(self) -> Path:
        return self.root / "var/lib/floydd"

    @property
    def config_dir(self) -> Path:
        return self.root / "etc/floydd"

    @property
    def config_file(self) -> Path:
        return self.config_dir / "floydd.toml"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run/floydd"

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / "floydd.sock"


def system_paths(env: Mapping[str, str] | None = None) -> SystemPaths:
    """The service install's paths: ``/``, or ``FLOYDD_SYSTEM_ROOT`` (tests)."""
    env = os.environ if env is None else env
    root = Path(env.get("FLOYDD_SYSTEM_ROOT") or "/").expanduser().absolute()
    return SystemPaths(root=root, group=env.get("FLOYDD_SYSTEM_GROUP") or DEFAULT_GROUP)


def service_installed(paths: SystemPaths, exists: Callable[[Path], bool] = os.path.exists) -> bool:
    """Whether a system daemon is installed here (its config folder or its state exists),
    whether or not it runs."""
    return exists(paths.config_dir) or exists(paths.state_dir)


@dataclass(frozen=True, slots=True)
class Found:
    """What :func:`discover` decided: ``kind`` is ``remote``, ``user``, ``system``, ``start``
    (start a user daemon) or ``down`` (a stopped service: say so, start nothing)."""

    kind: str
    where: str = ""


def discover(env: Mapping[str, str], user_socket: Path, paths: SystemPaths, *,
             answers: Callable[[Path], bool], exists: Callable[[Path], bool] = os.path.exists) -> Found:
    """DESIGN §5's order. ``answers(socket)``: whether a daemon answers there. An explicit
    ``FLOYDD_STATE_DIR`` names the user's daemon: the system socket is not looked at."""
    if env.get("FLOYD_HOST"):
        return Found("remote", env["FLOYD_HOST"])
    if answers(user_socket):
        return Found("user", str(user_socket))
    explicit = bool(env.get("FLOYDD_STATE_DIR"))
    if not explicit and exists(paths.socket_path) and answers(paths.socket_path):
        return Found("system", str(paths.socket_path))
    if not explicit and env.get(USER_DAEMON_ENV) not in ("1", "true", "yes") and service_installed(paths, exists):
        return Found("down", str(paths.socket_path))
    return Found("start", str(user_socket))


def job_account(name: str, daemon_uid: int | None = None) -> tuple[int, int]:
    """``(uid, gid)`` of the job user ``name`` (config ``job_user``) a system daemon runs jobs
    as (:mod:`floydd.agent.jobuser`); refused when missing, root, or the daemon's own account."""
    import pwd

    from floydd.errors import UserError
    daemon_uid = os.geteuid() if daemon_uid is None else daemon_uid
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise UserError(f"the job user {name!r} does not exist: system mode runs every job as it",
                        hint=f"create it: useradd --system --no-create-home --shell /usr/sbin/nologin {name} "
                             "(or set job_user in /etc/floydd/floydd.toml)") from None
    if entry.pw_uid == 0 or entry.pw_gid == 0 or entry.pw_uid == daemon_uid:
        raise UserError(f"the job user {name!r} is root or the daemon's own account (uid {entry.pw_uid}): "
                        "jobs must not run as either",
                        hint="set job_user to an unprivileged account of its own, e.g. floyd-job")
    return entry.pw_uid, entry.pw_gid
