"""Real ``floydd`` processes on loopback: one box, or two formed into a cluster with the
real CLI, and the operator CLI ``floydd`` as the tests run it.

:func:`box` is the one factory: a :class:`Daemon` (state folder, project folder, the
environment that points the CLI at it, tight timings) not started yet; ``box(tmp_path)`` is
the box of the ``daemon`` fixture, ``box(tmp_path, "box-a")`` one of a cluster (its node
name, a faster heartbeat and lost-after). :func:`form` makes box-a found a cluster (no GPU)
and box-b join it (one fake GPU, dev option); :func:`pair` does that for a fixture. Every
daemon is stopped and the agents it left are killed (:func:`stop`, :func:`kill_agents`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from floydd.client import Client
from floydd.config import socket_path_for
from tests.conftest import free_ports
from tests.harness.wait import wait_until

__all__ = ["Daemon", "box", "floydd", "kill_agents", "pair", "form", "stop", "status", "final"]

TIMINGS = {"FLOYDD_TAIL_INTERVAL": "0.05", "FLOYDD_SAMPLE_INTERVAL": "0.5", "FLOYDD_STOP_GRACE": "2",
           "PYTHONUNBUFFERED": "1"}
"""What every test daemon runs with: tight timings, unbuffered logs."""

CLUSTER_TIMINGS = {"FLOYDD_CLUSTER_HEARTBEAT": "0.5", "FLOYDD_JOB_LOST_AFTER": "4"}
"""And a box of a cluster: a node silent for seconds, not minutes, is lost."""


def floydd(*args, state: Path | str | None = None, host=None, env: dict | None = None,
           cwd: Path | str | None = None, check: bool = True, timeout: float = 120,
           input: str | None = None, python: str = sys.executable) -> subprocess.CompletedProcess:
    """``floydd ARGS`` (the operator CLI) to completion, output captured; the one way tests run it.

    ``state``: adds ``--state-dir STATE`` (every command and subcommand takes it). ``host``: run in that
    netns host (:class:`tests.netns.network.Host`; ``env`` then holds settings added to its
    environment). Otherwise ``env`` is the whole environment (default: this one, never a
    remote daemon's FLOYD_HOST). ``python``: another release's interpreter. Fails the test if
    the command fails (``check``)."""
    argv = [python, "-m", "floydd.cli.floydd", *map(str, args), *(() if state is None else ("--state-dir", str(state)))]
    if host is not None:
        res = host.run(argv, check=False, timeout=timeout, env=env, input=input,
                       **({} if cwd is None else {"cwd": cwd}))
    else:
        env = {**os.environ, "FLOYD_HOST": ""} if env is None else env
        res = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and res.returncode != 0:
        where = f" in {host.ns}" if host is not None else ""
        raise AssertionError(f"floydd {' '.join(argv[3:])}{where} failed ({res.returncode}):\n{res.stdout}\n"
                             f"{res.stderr}")
    return res


@dataclass
class Daemon:
    state: Path
    env: dict
    project: Path
    proc: subprocess.Popen | None = None

    @property
    def client(self) -> Client:
        return Client(socket_path_for(self.state), timeout=30)

    def start(self, *extra: str) -> None:
        log = open(self.state.parent / "daemon.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(self.state),
             "--dev-fake-gpus", "2", *extra],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self.client.ping() or self.proc.poll() is not None, timeout=30,
                   what="daemon to answer")
        assert self.proc.poll() is None, (self.state.parent / "daemon.log").read_text()[-2000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def floyd(self, *args: str, check: bool = True, cwd: Path | None = None, timeout: float = 120,
              input: str | None = None) -> subprocess.CompletedProcess:
        res = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", *args], env=self.env,
                             cwd=cwd or self.project, capture_output=True, text=True, timeout=timeout,
                             input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"floyd {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res

    def floyd_json(self, *args: str) -> object:
        return json.loads(self.floyd(*args, "--json").stdout)

    def floydd(self, *args, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """``floydd ARGS`` on this box (its environment names its state folder)."""
        return floydd(*args, env=self.env, cwd=self.project, check=check, timeout=timeout)


def box(tmp_path: Path, name: str | None = None, *, state: Path | None = None, cluster: bool | None = None,
        env: dict[str, str | None] | None = None) -> Daemon:
    """A box, not started: the ``daemon`` fixture's (``name`` None: state and project right
    under ``tmp_path``) or a named one's (under ``tmp_path/name``, node ``name``), a cluster's
    timings by default when named (``cluster``). ``state``: its state folder elsewhere (a small
    disk); ``env``: more settings (a None value removes one)."""
    root = tmp_path if name is None else tmp_path / name
    state = state or root / "state"
    project = root / "proj"
    project.mkdir(parents=True, exist_ok=True)
    full = {**os.environ, "FLOYDD_STATE_DIR": str(state), **TIMINGS}
    if name is not None:
        full["FLOYDD_NODE_NAME"] = name
    if cluster if cluster is not None else name is not None:
        full.update(CLUSTER_TIMINGS)
    full.update(env or {})
    full.pop("FLOYD_HOST", None)
    return Daemon(state=state, env={k: v for k, v in full.items() if v is not None}, project=project)


def kill_agents(state: Path) -> None:
    """SIGKILL the process group of every agent a daemon on ``state`` started (it may be gone)."""
    for status in state.glob("jobs/*/*/status.json"):
        try:
            pid = json.loads(status.read_text()).get("agent_pid")
            if pid:
                os.killpg(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


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


def form(a: Daemon, b: Daemon) -> None:
    """box-a founds the cluster (no GPU), box-b joins it (one fake GPU)."""
    pa, pb, api_a, api_b = free_ports(4)
    a.floydd("init", "--name", "lab", "--listen", f"127.0.0.1:{pa}", "--advertise", f"127.0.0.1:{pa}",
             "--api-listen", f"127.0.0.1:{api_a}")
    a.start("--dev-fake-gpus", "0")
    token = a.floydd("token", "create").stdout.strip()
    b.floydd("join", token, "--listen", f"127.0.0.1:{pb}", "--advertise", f"127.0.0.1:{pb}",
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
        kill_agents(one.state)


def status(daemon: Daemon, key: str) -> dict:
    return daemon.floyd_json("status", key)[0]


def final(daemon: Daemon, key: str, timeout: float = 90) -> dict:
    return wait_until(lambda: (j := status(daemon, key))["state"] in ("success", "failed", "stopped", "lost",
                                                                    "timeout") and j,
                      timeout=timeout, what=f"{key} to end")
