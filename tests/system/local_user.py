"""A second local user made for one test (``useradd``), gone after it even on failure.

``other_user`` gives a :class:`LocalUser`; ``user.run([...])`` and ``user.popen([...])`` run
a command as that user (``setpriv``: that uid and gid, no supplementary groups). Root only:
the fixture skips, saying why, elsewhere (CI runs as root, as for the netns tests). Tests
end what they started as that user by PID before the user is removed.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from dataclasses import dataclass

import pytest

__all__ = ["LocalUser", "other_user"]


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    def _as(self, argv: list[str]) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("timeout", 30)
        return subprocess.run(self._as(argv), capture_output=True, text=True, cwd="/", **kw)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self._as(argv), cwd="/", **kw)


@pytest.fixture
def other_user():
    if os.geteuid() != 0:
        pytest.skip("second-user tests need root (useradd)")
    missing = [tool for tool in ("useradd", "userdel", "setpriv") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"second-user tests need {', '.join(missing)}")
    name = f"flt{secrets.token_hex(4)}"
    made = subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    try:
        entry = pwd.getpwnam(name)
        yield LocalUser(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", "-r", name], capture_output=True, timeout=30)
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
