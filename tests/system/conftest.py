"""Real processes: a real ``floydd`` daemon per test and the real ``floyd`` CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from tests.conftest import wait_until


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


def _kill_agents(state: Path) -> None:
    for status in state.glob("jobs/*/*/status.json"):
        try:
            pid = json.loads(status.read_text()).get("agent_pid")
            if pid:
                os.killpg(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


@pytest.fixture
def daemon(tmp_path):
    state = tmp_path / "state"
    project = tmp_path / "proj"
    project.mkdir()
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "FLOYDD_TAIL_INTERVAL": "0.05",
           "FLOYDD_SAMPLE_INTERVAL": "0.5", "FLOYDD_STOP_GRACE": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("FLOYD_HOST", None)
    d = Daemon(state=state, env=env, project=project)
    d.start()
    d.floyd("init", "proj")
    yield d
    if d.proc and d.proc.poll() is None:
        d.kill(signal.SIGTERM)
    _kill_agents(state)
