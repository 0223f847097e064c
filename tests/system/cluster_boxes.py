"""Two real daemons on loopback formed into a cluster with the real CLI, for the system tests
of jobs across boxes: box-a founds it (no GPU), box-b joins (one fake GPU, dev option)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from tests.conftest import free_ports, wait_until
from tests.system.conftest import Daemon, _kill_agents

__all__ = ["pair", "box", "form", "stop", "status", "final"]


def pair(tmp_path: Path, files: dict[str, str]) -> Iterator[tuple[Daemon, Daemon]]:
    """Form the cluster, wait until both boxes list both nodes, put ``files`` in box-a's
    project; yields (box-a, box-b) and stops both (for a fixture to ``yield from``)."""
    a, b = box(tmp_path, "box-a"), box(tmp_path, "box-b")
    form(a, b)
    try:
        for one in (a, b):
            wait_until(lambda one=one: len(one.floyd_json("nodes")) == 2, timeout=60, what="both nodes listed")
        a.floyd("init", "proj")
        for name, text in files.items():
            (a.project / name).write_text(text)
        yield a, b
    finally:
        stop(a, b)


def floydd(env: dict, *args) -> str:
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", *map(str, args)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0, f"floydd {args} failed: {res.stdout}{res.stderr}"
    return res.stdout


def box(tmp_path: Path, name: str) -> Daemon:
    state, project = tmp_path / name / "state", tmp_path / name / "proj"
    project.mkdir(parents=True)
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "FLOYDD_NODE_NAME": name, "FLOYDD_TAIL_INTERVAL": "0.05",
           "FLOYDD_SAMPLE_INTERVAL": "0.5", "FLOYDD_STOP_GRACE": "2", "FLOYDD_CLUSTER_HEARTBEAT": "0.5",
           "FLOYDD_JOB_LOST_AFTER": "4", "PYTHONUNBUFFERED": "1"}
    env.pop("FLOYD_HOST", None)
    return Daemon(state=state, env=env, project=project)


def form(a: Daemon, b: Daemon) -> None:
    """box-a founds the cluster (no GPU), box-b joins it (one fake GPU)."""
    pa, pb, api_a, api_b = free_ports(4)
    floydd(a.env, "init", "--name", "lab", "--listen", f"127.0.0.1:{pa}", "--advertise", f"127.0.0.1:{pa}",
           "--api-listen", f"127.0.0.1:{api_a}")
    a.start("--dev-fake-gpus", "0")
    token = floydd(a.env, "token", "create").strip()
    floydd(b.env, "join", token, "--listen", f"127.0.0.1:{pb}", "--advertise", f"127.0.0.1:{pb}",
           "--api-listen", f"127.0.0.1:{api_b}")
    b.start("--dev-fake-gpus", "1")


def stop(*boxes: Daemon) -> None:
    """Stop the daemons cleanly (kill them if that hangs) and the agents they left."""
    for one in boxes:
        if one.proc and one.proc.poll() is None:
            one.proc.send_signal(signal.SIGTERM)
            try:
                one.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                one.kill()
        _kill_agents(one.state)


def status(daemon: Daemon, key: str) -> dict:
    return daemon.floyd_json("status", key)[0]


def final(daemon: Daemon, key: str, timeout: float = 90) -> dict:
    return wait_until(lambda: (j := status(daemon, key))["state"] in ("success", "failed", "stopped", "lost",
                                                                    "timeout") and j,
                      timeout=timeout, what=f"{key} to end")
