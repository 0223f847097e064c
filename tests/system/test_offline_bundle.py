"""The offline bundle (packaging/): built here, installed on a box with no network at all (a
namespace with only loopback up) into a fresh venv with ``--no-index``, and that install runs
the daemon and a job. The no-torch variant keeps it quick; nothing is cached between runs but
what pip itself caches while building."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)

ROOT = Path(__file__).resolve().parents[2]
FINAL = {"success", "failed", "stopped", "timeout", "lost"}
NO_REPO = {"PYTHONPATH": None, "FLOYD_HOST": None}  # only what the bundle installed is importable


def _build(out: Path) -> Path:
    res = subprocess.run([sys.executable, str(ROOT / "packaging" / "build-bundle"), "--variant", "no-torch",
                          "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (bundle,) = out.glob("floydd-*-no-torch.tar")
    return bundle


def _unpack(bundle: Path, into: Path) -> Path:
    with tarfile.open(bundle) as tar:
        tar.extractall(into, filter="data")
    (top,) = into.iterdir()
    return top


def _lock(top: Path) -> dict[str, str]:
    """wheel name -> hash, read back from requirements.lock and matched to the files."""
    pins = {}
    for line in (top / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("==")
            pins[name] = rest.split("--hash=sha256:", 1)[1]
    return pins


def _users(group: str, user: str) -> tuple[bool, bool]:
    def exists(cmd: list[str]) -> bool:
        return subprocess.run(cmd, capture_output=True).returncode == 0
    return exists(["getent", "group", group]), exists(["id", "-u", user])


@pytest.mark.slow
def test_bundle_installs_with_no_network_and_runs_a_job(netns, tmp_path):
    took: dict[str, float] = {}
    t = time.monotonic()
    top = _unpack(_build(tmp_path / "dist"), tmp_path / "unpacked")
    took["build"] = time.monotonic() - t

    # what is in it: every wheel locked by its real hash, no torch, no textual-serve (an extra)
    wheels = {p.name: p for p in (top / "wheels").iterdir()}
    pins = _lock(top)
    assert len(pins) == len(wheels) and {"floydd", "pip", "aiohttp", "sqlite-utils", "ifaddr"} <= set(pins)
    for name, path in wheels.items():
        norm = name.split("-")[0].replace("_", "-").lower()
        assert pins[norm] == hashlib.sha256(path.read_bytes()).hexdigest(), name
    assert not {"torch", "textual-serve"} & set(pins)

    box = netns(1).host(1)
    box.run(["ip", "link", "set", box.ifname, "down"])     # only loopback is left up
    up = [line.split(":")[1].strip() for line in box.run(["ip", "-o", "link", "show", "up"]).stdout.splitlines()]
    assert up == ["lo"], up
    assert box.run(["ip", "route"]).stdout.strip() == ""
    probe = box.run([sys.executable, "-c", "import socket; socket.create_connection(('192.0.2.1', 443), 2)"],
                    check=False)
    assert "Network is unreachable" in probe.stderr

    venv, bindir, state, project = (tmp_path / n for n in ("opt-floydd", "bin", "state", "project"))
    group, user = f"fdb{os.getpid() % 100000}", f"fdb{os.getpid() % 100000}-job"
    assert _users(group, user) == (False, False)
    try:
        t = time.monotonic()
        res = box.run(["bash", str(top / "install.sh"), "--prefix", str(venv), "--bin-dir", str(bindir),
                       "--system", "--group", group, "--job-user", user], env=NO_REPO, cwd=tmp_path, timeout=240)
        took["install"] = time.monotonic() - t
        assert "floydd init --name LAB" in res.stdout and "floydd join TOKEN" in res.stdout, res.stdout
        assert _users(group, user) == (True, True)
    finally:
        subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
    assert os.readlink(bindir / "floyd") == str(venv / "bin" / "floyd")
    where = box.run([str(venv / "bin" / "python"), "-c", "import floydd; print(floydd.__file__)"],
                    env=NO_REPO, cwd=tmp_path).stdout
    assert where.startswith(str(venv / "lib")), where

    # the installed daemon and CLI, inside the box with no network
    env = {**NO_REPO, "FLOYDD_STATE_DIR": str(state), "FLOYDD_TAIL_INTERVAL": "0.05"}
    t = time.monotonic()
    with open(tmp_path / "daemon.log", "wb") as log:
        daemon = box.popen([str(bindir / "floydd"), "start", "--state-dir", str(state)], env=env, cwd=tmp_path,
                           stdout=log, stderr=subprocess.STDOUT)
    client = Client(socket_path_for(state), timeout=30)
    wait_until(lambda: client.ping() or daemon.poll() is not None, timeout=60, what="the installed daemon",
               details=lambda: (tmp_path / "daemon.log").read_text()[-2000:])
    assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-2000:]

    def floyd(*args: str) -> str:
        res = box.run([str(bindir / "floyd"), *args], env=env, cwd=project, check=False, timeout=120)
        assert res.returncode == 0, f"floyd {args}: {res.stdout}{res.stderr}"
        return res.stdout

    project.mkdir()
    floyd("init", "hello")
    key = json.loads(floyd("run", "--json", "echo hi from the bundle"))["id"]
    job = wait_until(lambda: (j := client.job(key))["state"] in FINAL and j, timeout=60, what=f"{key} to end")
    assert job["state"] == "success", job
    assert "hi from the bundle" in floyd("logs", key)
    took["daemon+job"] = time.monotonic() - t

    serve = box.run([str(bindir / "floyd"), "top", "--serve"], env=env, cwd=project, check=False)
    assert serve.returncode == 1 and "pip install 'floydd[serve]'" in serve.stderr, serve.stderr
    daemon.terminate()
    daemon.wait(timeout=30)
    print("offline bundle: " + ", ".join(f"{k} {v:.1f}s" for k, v in took.items()))
