"""A job, and the build of its floyd_requirements.txt, try to leave their box (real daemon,
real bwrap, real pip); and a box without a working sandbox says so, or refuses.

The state folder lives under /var/tmp, not /tmp: a sandbox's /tmp is private anyway, so
state under /tmp would be hidden whatever the allow-list says.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from floydd.agent.sandbox import probe_bwrap
from floydd.config import socket_path_for
from tests.conftest import wait_until
from tests.harness.processes import Daemon, kill_agents
from tests.harness.leftovers import watch
from tests.harness.processes import box as new_box

pytestmark = pytest.mark.slow
needs_bwrap = pytest.mark.skipif(probe_bwrap()[0] is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it)")
DAEMON_SECRET = "aws-daemon-secret-1234"
FINAL = {"success", "failed", "stopped", "timeout", "lost"}


@pytest.fixture
def box():
    """A daemon whose state is outside /tmp and whose environment holds a secret."""
    root = watch(tempfile.mkdtemp(prefix="floydd-sbx-", dir="/var/tmp"))
    d = new_box(root, env={"FLOYDD_BUILD_NETWORK": "false", "AWS_SECRET_ACCESS_KEY": DAEMON_SECRET})
    try:
        yield d
    finally:
        if d.proc and d.proc.poll() is None:
            d.kill(signal.SIGTERM)
        kill_agents(d.state)
        shutil.rmtree(root, ignore_errors=True)


def _final(d: Daemon, key: str, timeout: float = 90) -> dict:
    return wait_until(lambda: (j := d.client.job(key))["state"] in FINAL and j, timeout=timeout,
                      what=f"{key} to end")


def _secrets(state: Path) -> dict[str, Path]:
    """The files of the state folder a job must never read."""
    token = state / "api-token"
    if not token.exists():   # a daemon with --dev-tcp makes it; its presence is what matters here
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"api-token-secret-5678\n")
        os.close(fd)
    return {"store key": state / "store" / "key", "api token": token}


_BACKEND = '''
import os
for name, path in {paths!r}.items():
    try:
        data = open(path, "rb").read()
        print("LEAK", name, data.hex())
    except OSError as exc:
        print("denied", name, type(exc).__name__)
for marker in {markers!r}:
    try:
        open(marker, "w").write("escaped")
        print("LEAK wrote", marker)
    except OSError as exc:
        print("denied marker", type(exc).__name__)
print("LEAK env" if os.environ.get("AWS_SECRET_ACCESS_KEY") else "denied env")
raise SystemExit("backend-ran: refusing to build")
'''


@needs_bwrap
def test_a_requirement_whose_build_reads_the_secrets_and_writes_outside_is_contained(box):
    box.start("--sandbox", "require")
    box.floyd("init", "proj")
    secrets = _secrets(box.state)
    outside = box.state.parent / "outside"
    outside.mkdir()
    markers = [str(outside / "marker"), str(box.state / "escaped")]
    pkg = box.project / "pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n')
    (pkg / "backend.py").write_text(_BACKEND.format(paths={k: str(v) for k, v in secrets.items()}, markers=markers))
    (box.project / "floyd_requirements.txt").write_text("./pkg\n")
    box.floyd("run", "python -c pass")
    done = _final(box, "proj/1")
    logs = box.floyd("logs", "proj/1").stdout
    assert done["state"] == "failed" and "floyd_requirements.txt" in done["reason"], (done, logs)
    assert "backend-ran" in logs, logs            # the package's own code did run, in the build
    for name in secrets:
        assert f"denied {name}" in logs, logs
    assert logs.count("denied marker") == 2 and "denied env" in logs and "LEAK" not in logs, logs
    assert not any(os.path.exists(m) for m in markers)
    assert DAEMON_SECRET not in logs and secrets["store key"].read_bytes().hex() not in logs


_PROBE = '''
import os, socket, sys
tries = {{"home under /var": {home!r}, "store key": {key!r}, "api token": {token!r},
         "other job": {other!r}}}
for name, path in tries.items():
    try:
        open(path, "rb").read()
        print("LEAK", name)
    except OSError as exc:
        print("denied", name, type(exc).__name__)
try:
    os.listdir({home_dir!r})
    print("LEAK home listing")
except OSError:
    print("denied home listing")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({sock!r})
    print("LEAK socket")
except OSError as exc:
    print("denied socket", type(exc).__name__)
print("LEAK env" if {secret!r} in repr(dict(os.environ)) else "denied env")
print("own code", open("/code/probe.py").read().startswith("\\nimport"))
'''


@needs_bwrap
def test_a_job_reads_no_home_under_var_no_daemon_env_no_other_workspace_and_no_socket(box):
    base = "/var" if os.access("/var", os.W_OK) else "/var/tmp"
    home = Path(tempfile.mkdtemp(prefix="floydd-test-home-", dir=base))
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text("home-secret\n")
        os.chmod(home, 0o755)
        box.start()   # a user daemon: sandbox = auto (prefer), bwrap works here
        box.floyd("init", "proj")
        secrets = _secrets(box.state)
        (box.project / "secret.txt").write_text("other-job-secret\n")
        box.floyd("run", "python -c pass")
        first = _final(box, "proj/1")
        other = box.state / "jobs" / "proj" / "1" / "code" / "secret.txt"
        assert first["state"] == "success" and other.exists()
        (box.project / "secret.txt").unlink()
        (box.project / "probe.py").write_text(_PROBE.format(
            home=str(home / ".ssh" / "id_ed25519"), home_dir=str(home), key=str(secrets["store key"]),
            token=str(secrets["api token"]), other=str(other), sock=str(socket_path_for(box.state)),
            secret=DAEMON_SECRET))
        run = box.floyd("run", "python probe.py")
        assert "WITHOUT a sandbox" not in run.stderr
        done = _final(box, "proj/2")
        logs = box.floyd("logs", "proj/2").stdout
        assert done["state"] == "success", logs
        for name in ("home under /var", "store key", "api token", "other job", "home listing", "socket", "env"):
            assert f"denied {name}" in logs, logs
        assert "LEAK" not in logs and "own code True" in logs, logs
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_without_a_working_sandbox_the_box_says_so_everywhere_and_require_refuses(box):
    fake = box.state.parent / "fakebin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: creating new namespace failed' >&2\nexit 1\n")
    os.chmod(fake / "bwrap", 0o755)
    box.env["PATH"] = f"{fake}:{box.env.get('PATH', os.defpath)}"
    box.start()                                    # a user daemon: sandbox = auto means prefer
    box.floyd("init", "proj")
    run = box.floyd("run", "python -c \"print('ran unsandboxed')\"")
    warned = [line for line in run.stderr.splitlines() if "WITHOUT a sandbox" in line]
    assert len(warned) == 1 and "bwrap does not work here" in warned[0], run.stderr
    done = _final(box, "proj/1")
    assert done["state"] == "success"
    assert "WITHOUT a sandbox" in box.floyd("logs", "proj/1").stdout + box.floyd("logs", "proj/1").stderr
    assert "WITHOUT a sandbox" in box.floyd("info", "proj/1").stderr
    status = box.floydd("status", check=False, timeout=60)
    assert "WITHOUT a sandbox" in status.stderr and "sandbox none" in status.stdout
    daemon_log = "".join(p.read_text() for p in (box.state.parent / "daemon.log", box.state / "floydd.log")
                         if p.exists())
    assert "WITHOUT a sandbox" in daemon_log

    for setting in ({"FLOYDD_SANDBOX": "require"},   # said, or implied by system mode (whose jobs run as job_user)
                    {"FLOYDD_SYSTEM": "true", "FLOYDD_JOB_USER": "nobody"}):
        box.kill(signal.SIGTERM)
        box.env.update(setting)
        box.start()
        refused = box.floyd("run", "python -c pass", check=False)
        assert refused.returncode != 0 and "requires a sandbox for jobs" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and "apt install bubblewrap" in refused.stderr
        assert box.client.jobs(project="proj")[0]["id"] == "proj/1"   # nothing was submitted
        for name in setting:
            box.env.pop(name)
