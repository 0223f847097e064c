"""System mode for real: a root daemon with its root under a temp folder (FLOYDD_SYSTEM_ROOT),
a group-shared socket, a member of the group submitting through it, jobs running as the
unprivileged job user; and a box whose service is installed but stopped.

Root only (useradd, groupadd, chown), as CI runs; every account and group made here is removed
after the test, even on failure (the ``lab`` fixture: :mod:`tests.system.system_lab`).
"""

from __future__ import annotations

import grp
import os
import pwd
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from floydd.agent.sandbox import probe_bwrap
from floydd.client import Client
from tests.conftest import wait_until
from tests.system.system_lab import lab  # noqa: F401  (the fixture: accounts, a root, the daemon)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="system mode tests need root (useradd, chown)"),
              pytest.mark.skipif(probe_bwrap()[0] is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it)")]
FINAL = {"success", "failed", "stopped", "timeout", "lost"}


def test_group_socket_and_jobs_as_the_job_user(lab):
    lab.start()
    gid = grp.getgrnam(lab.group).gr_gid
    folder, sock = os.stat(lab.socket.parent), os.stat(lab.socket)
    assert (stat.S_IMODE(folder.st_mode), folder.st_gid) == (0o750, gid)
    assert (stat.S_IMODE(sock.st_mode), sock.st_gid) == (0o660, gid)
    assert stat.S_IMODE(os.stat(lab.state).st_mode) == 0o700 and os.stat(lab.state).st_uid == 0

    project = lab.homes[lab.member] / "proj"
    project.mkdir()
    # the job says who it is, then tries the state folder and another job's workspace
    (project / "probe.sh").write_text(
        "id -u > /output/uid\n"
        f"ls {lab.state} > /output/state 2>&1 && echo READ >> /output/state\n"
        f"cat {lab.state}/jobs/*/1/output/uid > /output/other 2>&1 && echo READ >> /output/other\n"
        "echo hello > /output/mine\n")
    os.chown(project, *(lambda e: (e.pw_uid, e.pw_gid))(pwd.getpwnam(lab.member)))
    os.chown(project / "probe.sh", *(lambda e: (e.pw_uid, e.pw_gid))(pwd.getpwnam(lab.member)))

    init = lab.floyd_as(lab.member, "init", "probe", cwd=project)
    assert init.returncode == 0, init.stderr
    for _ in range(2):   # -f: follows the job to its end and exits with its exit code
        res = lab.floyd_as(lab.member, "run", "-f", "sh probe.sh", cwd=project)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "started a single-node floydd" not in res.stderr   # it used the system daemon
    job_uid, job_gid = pwd.getpwnam(lab.job_user).pw_uid, pwd.getpwnam(lab.job_user).pw_gid
    outputs = [Path(p) for p in sorted(lab.state.glob("jobs/*/*/output"))]
    assert len(outputs) == 2
    for out in outputs:
        assert (out / "uid").read_text().strip() == str(job_uid)        # not root, not the daemon
        assert os.stat(out / "mine").st_uid == job_uid and os.stat(out / "mine").st_gid == job_gid
        assert "READ" not in (out / "state").read_text()               # the state folder is not there
        assert "READ" not in (out / "other").read_text()               # nor another job's files
        assert os.stat(out.parent).st_uid == 0 and stat.S_IMODE(os.stat(out.parent).st_mode) == 0o700

    # the job's output: its owner fetches it (a tar, unpacked as them), another member may not
    for name in ("root", lab.member, lab.member2):
        add = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", "user", "--system", "add", name,
                              *(["--admin"] if name == "root" else [])], env=lab.env, capture_output=True,
                             text=True, timeout=60)
        assert add.returncode == 0, add.stderr
    mine = lab.floyd_as(lab.member, "output", "probe/1", str(lab.homes[lab.member] / "got"))
    assert mine.returncode == 0, mine.stderr
    got = lab.homes[lab.member] / "got" / "mine"
    assert got.read_text() == "hello\n" and os.stat(got).st_uid == pwd.getpwnam(lab.member).pw_uid
    theirs = lab.floyd_as(lab.member2, "output", "probe/1", str(lab.homes[lab.member2] / "got"))
    assert theirs.returncode != 0 and f"user {lab.member2} may not clone probe/1/output" in theirs.stderr, theirs.stderr
    assert f"it is the output of {lab.member}'s job probe/1" in theirs.stderr, theirs.stderr
    assert "Traceback" not in theirs.stderr and not (lab.homes[lab.member2] / "got" / "mine").exists()
    # a member cannot make the root daemon read a path of the box for them: the CLI reads the
    # folder itself (as the member), and the API refuses a path from anyone but the daemon's user
    secret = lab.root / "secret"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("root only\n")
    sneaky = lab.floyd_as(lab.member, "data", "upload", str(secret), "--name", "stolen")
    assert sneaky.returncode != 0 and "Traceback" not in sneaky.stderr
    raw = lab.run_python_as(lab.member, "from floydd.client import Client; import sys, pathlib\n"
                            f"c = Client(pathlib.Path({str(lab.socket)!r}))\n"
                            f"list(c.upload(pathlib.Path({str(secret)!r}), 'stolen'))")
    assert raw.returncode != 0 and "only for its own user" in raw.stderr, raw.stderr
    raw = lab.run_python_as(lab.member, "from floydd.client import Client; import pathlib\n"
                            f"c = Client(pathlib.Path({str(lab.socket)!r}))\n"
                            f"c.submit({{'project': 'probe', 'command': 'true', 'code_path': {str(secret)!r}}})")
    assert raw.returncode != 0 and "only for its own user" in raw.stderr, raw.stderr
    listed = Client(lab.socket, timeout=30).datasets()
    assert not any("stolen" in str(d) for d in listed)

    # the outsider (not in the group) cannot reach the socket: the CLI says so, starts nothing of theirs
    denied = subprocess.run(["setpriv", f"--reuid={pwd.getpwnam(lab.outsider).pw_uid}",
                             f"--regid={pwd.getpwnam(lab.outsider).pw_gid}", "--clear-groups", "--",
                             sys.executable, "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX);"
                             f"s.connect({str(lab.socket)!r})"], capture_output=True, text=True, timeout=30)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr


def test_stopped_service_is_said_not_replaced(lab):
    (lab.root / "etc/floydd").mkdir(parents=True)    # installed, never started
    res = lab.floyd_as(lab.member, "status")
    assert res.returncode != 0
    assert "the floydd service is down: sudo systemctl start floydd" in res.stderr
    assert "Traceback" not in res.stderr
    assert not any(lab.homes[lab.member].rglob("floydd.sock"))       # no user daemon was started
    # asked for explicitly (FLOYD_USER_DAEMON=1), a user daemon of one's own is started (as root
    # here: the test's Python may live where other accounts cannot run it)
    home = lab.root / "roothome"
    home.mkdir(mode=0o700)
    own = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "status"], cwd=home, capture_output=True,
                         text=True, timeout=120,
                         env={**lab.env, "FLOYD_USER_DAEMON": "1", "HOME": str(home),
                              "XDG_DATA_HOME": str(home / "data")})
    try:
        assert own.returncode == 0, own.stderr
        assert "started a single-node floydd" in own.stderr
    finally:
        lock = home / "data/floydd/floydd.lock"
        if lock.exists():
            pid = int(lock.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what="user daemon to stop")
