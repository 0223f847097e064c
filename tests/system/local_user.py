"""A second local user made for one test (``useradd``), gone after it even on failure.

``other_user`` gives a :class:`LocalUser`; ``user.run([...])`` and ``user.popen([...])`` run
a command as that user (``setpriv``: that uid and gid, no supplementary groups). Root only:
the fixture skips, saying why, elsewhere (CI runs as root, as for the netns tests). Tests
end what they started as that user by PID before the user is removed.

:func:`as_user` is the command prefix itself. The Python running the tests (and this checkout)
may live under a folder other accounts cannot enter (``/root`` is 0700 on many machines, and
pyenv installs there): then the command runs in a mount namespace of its own where each such
folder is a tmpfs showing only what the test needs (the interpreter's prefixes, the
checkout), bound from the real one. The host's folders keep their modes; what stays on the
host is an empty mount point per such folder under ``/run/floydd-test-real``.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["LocalUser", "other_user", "as_user"]

_CHECKOUT = Path(__file__).resolve().parents[2]
_STAGING = "/run/floydd-test-real"
"""Empty mount points (one per hidden folder, shared by every such command) that stay on the host."""


def as_user(uid: int, gid: int, argv: list[str], *, init_groups: bool = False) -> list[str]:
    """``argv`` run as ``uid``/``gid`` (``init_groups``: with that account's supplementary
    groups, else none), able to run this Python and import this checkout (module docstring)."""
    groups = "--init-groups" if init_groups else "--clear-groups"
    switch = ["setpriv", f"--reuid={uid}", f"--regid={gid}", groups, "--", *argv]
    hidden: dict[Path, set[str]] = {}
    for needed in {Path(sys.base_prefix), Path(sys.prefix), _CHECKOUT}:
        for top in reversed(needed.resolve().parents):
            st = os.stat(top)
            if st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
                hidden.setdefault(top, set()).add(needed.resolve().relative_to(top).parts[0])
                break
    if not hidden:
        return switch
    steps = ["set -e"]
    for n, (top, children) in enumerate(sorted(hidden.items())):
        real = f"{_STAGING}/{n}"     # the real folder, seen from inside the namespace only
        steps += [f"mkdir -p {real}", f"mount --bind {shlex.quote(str(top))} {real}",
                  f"mount -t tmpfs -o mode=0755 floydd-test {shlex.quote(str(top))}"]
        for child in sorted(children):
            inside = shlex.quote(str(top / child))
            steps += [f"mkdir -p {inside}", f"mount --bind {real}/{shlex.quote(child)} {inside}"]
    steps.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "; ".join(steps), "sh", *switch]


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    def _as(self, argv: list[str]) -> list[str]:
        return as_user(self.uid, self.gid, argv)

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
