"""A root daemon in system mode with its root under /var/tmp (FLOYDD_SYSTEM_ROOT), and local
accounts made for one test: the shared fixture of the system-mode tests.

:func:`system_lab` makes a group (the socket's), the job user, the members (in the group) and
the outsiders (not in it), each with a home under the root, and removes every account, the
group, the daemon, its agents and the root after the test, even on failure. Accounts are
named by role and a random suffix (``members={"member": "flm"}`` makes ``lab.member`` =
``flm3a9f0c``). ``lab`` is the fixture test_system_mode.py uses: two members and an outsider.

Root only (useradd, groupadd, chown). The root lives under /var/tmp: a sandbox's /tmp is
private anyway, so a state folder under /tmp would be hidden whatever the sandbox does.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

import pytest

from floydd.client import Client
from tests.conftest import wait_until
from tests.harness.leftovers import watch
from tests.harness.processes import floydd, kill_agents
from tests.system.local_user import as_user

__all__ = ["lab", "system_lab", "SystemLab"]


def _sh(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"


@contextlib.contextmanager
def system_lab(*, members: Mapping[str, str], outsiders: Mapping[str, str] | None = None) -> Iterator["SystemLab"]:
    """A :class:`SystemLab` whose accounts are ``members`` and ``outsiders`` (role -> name
    prefix), gone after (module docstring)."""
    outsiders = outsiders or {}
    tag = secrets.token_hex(3)
    group, job_user = f"flg{tag}", f"flj{tag}"
    names = {role: f"{prefix}{tag}" for role, prefix in {**members, **outsiders}.items()}
    root = Path(watch(tempfile.mkdtemp(prefix="floydd-sys-", dir="/var/tmp")))
    os.chmod(root, 0o755)
    made_users: list[str] = []
    made_group = False
    box = None
    try:
        _sh("groupadd", group)
        made_group = True
        accounts = [(job_user, [])] + [(names[r], ["-G", group]) for r in members] + [(names[r], []) for r in outsiders]
        for name, extra in accounts:
            _sh("useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", *extra, name)
            made_users.append(name)
        homes = {}
        for name in names.values():
            home = root / "home" / name
            home.mkdir(parents=True)
            entry = pwd.getpwnam(name)
            os.chown(home, entry.pw_uid, entry.pw_gid)
            homes[name] = home
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("FLOYD", "XDG_"))},
               "FLOYDD_SYSTEM_ROOT": str(root), "FLOYDD_SYSTEM_GROUP": group, "FLOYDD_JOB_USER": job_user,
               "FLOYDD_TAIL_INTERVAL": "0.05", "FLOYDD_SAMPLE_INTERVAL": "0.5", "FLOYDD_STOP_GRACE": "2",
               "FLOYDD_BUILD_NETWORK": "false", "PYTHONUNBUFFERED": "1"}
        box = SystemLab(root=root, env=env, group=group, job_user=job_user, homes=homes, **names)
        yield box
    finally:
        proc = box.proc if box is not None else None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        kill_agents(root / "var/lib/floydd")
        for name in made_users:
            subprocess.run(["userdel", name], capture_output=True, timeout=30)
        if made_group:
            subprocess.run(["groupdel", group], capture_output=True, timeout=30)
        shutil.rmtree(root, ignore_errors=True)
        for name in made_users:
            with pytest.raises(KeyError):
                pwd.getpwnam(name)


@pytest.fixture
def lab():
    """A group, two members of it, an outsider, the job user; a system root under /var/tmp."""
    with system_lab(members={"member": "flm", "member2": "fln"}, outsiders={"outsider": "flo"}) as box:
        yield box


class SystemLab:
    """The accounts (attributes named by role), their ``homes``, the ``env`` that points floydd
    at the root; ``start()`` runs the system daemon as root."""

    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)
        self.proc: subprocess.Popen | None = None

    @property
    def state(self) -> Path:
        return self.root / "var/lib/floydd"

    @property
    def socket(self) -> Path:
        return self.root / "run/floydd/floydd.sock"

    def start(self) -> None:
        log = open(self.root / "daemon.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--system",
                                      "--dev-fake-gpus", "2"], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd="/")
        client = Client(self.socket, timeout=30)
        wait_until(lambda: (self.socket.exists() and client.ping()) or self.proc.poll() is not None, timeout=30,
                   what="system daemon to answer")
        assert self.proc.poll() is None, (self.root / "daemon.log").read_text()[-2000:]

    def floydd(self, *args: str) -> subprocess.CompletedProcess:
        """``floydd ARGS`` as root (the daemon's user), e.g. ``user --system add NAME``."""
        return floydd(*args, env=self.env, cwd="/", check=False, timeout=60)

    def run_python_as(self, name: str, code: str) -> subprocess.CompletedProcess:
        entry = pwd.getpwnam(name)
        return subprocess.run(as_user(entry.pw_uid, entry.pw_gid, [sys.executable, "-c", code], init_groups=True),
                              env={**self.env, "HOME": str(self.homes[name])},
                              cwd=self.homes[name], capture_output=True, text=True, timeout=60)

    def floyd_as(self, name: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        """``floyd ARGS`` as local user ``name``, with their groups (the socket's group among them)."""
        entry = pwd.getpwnam(name)
        env = {**self.env, "HOME": str(self.homes[name]), "USER": name}
        argv = as_user(entry.pw_uid, entry.pw_gid, [sys.executable, "-m", "floydd.cli.floyd", *args], init_groups=True)
        return subprocess.run(argv, env=env, cwd=cwd or self.homes[name], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
