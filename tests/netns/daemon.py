"""A real ``floydd`` daemon running in a test host (``Host.start_floydd``).

The daemon serves its unix socket in its state dir; the socket lives on the shared
filesystem, so the test process can also reach it with ``floydd.client.Client``. The CLI is
run *inside* the host (``floyd(...)``), as a user on that box would. Cluster flags are passed
through ``extra_args`` / ``env`` as they come.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from floydd.client import Client
from floydd.config import socket_path_for
from tests.harness.wait import wait_until
from tests.netns.network import REPO, Host

__all__ = ["Floydd"]


class Floydd:
    """``python -m floydd.cli.floydd start --state-dir STATE EXTRA...`` in one host."""

    def __init__(self, host: Host, state: Path, extra_args: Sequence[str], env: dict[str, str], *,
                 python: str = sys.executable, cwd: Path | str = REPO) -> None:
        self.host = host
        self.python, self.cwd = python, cwd
        """The interpreter (another release's venv, for the upgrade test) and where it starts:
        outside this checkout for another release, which ``python -m`` would import instead."""
        self.state = Path(state).absolute()
        self.extra_args = tuple(extra_args)
        self.env = {"FLOYDD_STATE_DIR": str(self.state), **env}
        self.log_path = self.state.parent / f"{self.state.name}-{host.ns}.log"
        self.proc: subprocess.Popen | None = None

    def __repr__(self) -> str:
        pid = self.proc.pid if self.proc else None
        return f"Floydd({self.host.ns}, {self.state}, pid={pid})"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def client(self) -> Client:
        return Client(socket_path_for(self.state), timeout=30)

    def start(self, timeout: float = 30) -> Floydd:
        """Start it and wait until its API answers; on failure, say why from its log."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self!r} is running already")
        self.state.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = self.host.popen(
                [self.python, "-m", "floydd.cli.floydd", "start", "--state-dir", str(self.state),
                 *self.extra_args],
                env=self._env(), stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd)
        wait_until(lambda: self.proc.poll() is not None or self.client.ping(), timeout, interval=0.05,
                   what=f"{self!r} to answer", details=self.log_tail)
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self!r} exited with {self.proc.returncode}:\n{self.log_tail()}")
        return self

    def floyd(self, *args: str, check: bool = True, timeout: float = 120, cwd: Path | str = REPO,
              input: str | None = None) -> subprocess.CompletedProcess:
        """The user CLI, run in this host against this daemon."""
        res = self.host.run([self.python, "-m", "floydd.cli.floyd", *args], check=False, timeout=timeout,
                            env=self._env(), cwd=cwd, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"floyd {' '.join(args)} in {self.host.ns} failed ({res.returncode}):\n"
                                 f"{res.stdout}\n{res.stderr}")
        return res

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: a clean shutdown."""
        return self._signal(signal.SIGTERM, timeout)

    def kill9(self) -> int:
        """SIGKILL the daemon alone (its detached job agents live on, as on a real box)."""
        return self._signal(signal.SIGKILL, 30)

    def restart(self, *extra_args: str, timeout: float = 30) -> Floydd:
        """Stop it if running, then start it again (with new extra args, if given)."""
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        if extra_args:
            self.extra_args = tuple(extra_args)
        return self.start(timeout=timeout)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def _signal(self, sig: int, timeout: float) -> int:
        assert self.proc is not None, "not started"
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=timeout)

    def _env(self) -> dict[str, str | None]:
        return {"FLOYD_HOST": None, **self.env}  # this host's own daemon, never a remote one
