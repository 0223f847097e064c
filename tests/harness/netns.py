"""The netns cluster: real daemons on network-namespace hosts, formed into a cluster, for
the outage tests and benchmarks.

The ``netns`` fixture: ``net = netns(3)`` gives 3 hosts (:class:`tests.netns.network.TestNetwork`),
torn down after the test; register it where it is used with ``from tests.harness.netns import
netns  # noqa: F401``. Tests skip, saying why, only when not root or without ``ip netns``.

``form(net, folder, ["0", "2", "2"], env)`` runs ``floydd init`` on host 1 and ``join`` on the
others (box i with that many fake GPUs, a dev/test option), starts each daemon, and waits
until every box is listed and autopilot made its voters; each box is ``(host, state,
daemon, client)``, the client on the box's unix socket (a file: reachable from the root
namespace). ``listed`` reads a job as the listing says (through the leader only), ``crash``
kills every process of a host's namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from floydd.errors import FloyddError
from tests.harness.wait import wait_until
from tests.netns._sys import netns_pids
from tests.netns.network import REPO, Host, TestNetwork, netns_unavailable_reason

__all__ = ["netns", "Floydd", "init_or_join", "form", "submit", "listed", "state_of", "job", "crash", "attempt"]


def init_or_join(net, tmp_path, i: int):
    """Host ``i``'s box: ``floydd init`` on host 1, a token from it and ``floydd join`` on the
    others (state in ``tmp_path/s<i>``, listening on the host's address); (host, state)."""
    host, state = net.host(i), tmp_path / f"s{i}"
    addr = f"{host.ip}:7654"
    if i == 1:
        host.floydd(state, "init", "--name", "lab", "--listen", addr, "--advertise", addr)
    else:
        token = net.host(1).floydd(tmp_path / "s1", "token", "create", "--ttl", "10m").stdout.strip()
        host.floydd(state, "join", token, "--listen", addr, "--advertise", addr)
    return host, state


def form(net, tmp_path, fake_gpus: list[str], env: dict[str, str], sandbox: dict[int, str] | None = None):
    """floydd init on host 1, join on the others (box i with ``fake_gpus[i - 1]`` and, if
    given, ``sandbox[i]``); returns [(host, state, daemon, client)]."""
    boxes = []
    for i, gpus in enumerate(fake_gpus, start=1):
        host, state = init_or_join(net, tmp_path, i)
        extra = {"FLOYDD_SANDBOX": sandbox[i]} if sandbox and i in sandbox else {}
        daemon = host.start_floydd(state, "--node-name", f"box{i}", "--dev-fake-gpus", gpus, env={**env, **extra})
        boxes.append((host, state, daemon, Client(socket_path_for(state), timeout=30)))
    client = boxes[0][3]
    wait_until(lambda: len(attempt(client.nodes) or []) == len(fake_gpus), timeout=60, what="every box listed")
    voters = 1 if len(fake_gpus) < 3 else 3               # autopilot keeps an odd number of voters
    wait_until(lambda: sum(m["role"] == "voter" for m in (attempt(client.cluster) or {}).get("members", ())) == voters,
               timeout=60, what=f"{voters} voters")
    return boxes


def attempt(call, *args):
    try:
        return call(*args)
    except FloyddError:
        return None


def submit(client, project, command: str, **fields) -> str:
    body = {"project": "outage", "command": command, "code_path": str(project), "idem_key": uuid.uuid4().hex,
            **fields}
    return client.submit(body)["id"]


def listed(client, key: str) -> dict:
    """The job as the listing says (it reads no box but the leader: ``floyd info`` also asks
    the box that ran the job for its events, which takes a timeout if it is cut off)."""
    return next((j for j in attempt(client.jobs, key.split("/")[0]) or () if j["id"] == key), {})


def state_of(client, key: str) -> str | None:
    return listed(client, key).get("state")


def job(client, key: str) -> dict:
    return attempt(client.job, key) or {}


def crash(host, daemon) -> None:
    """The box dies: every process in its namespace killed, its cable pulled."""
    daemon.kill9()
    for pid in netns_pids(host.ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def netns():
    """Factory: ``netns(n, **kw)`` -> an up :class:`TestNetwork`; everything goes at teardown."""
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"multi-host tests {reason}")
    made: list[TestNetwork] = []

    def make(n: int, **kw) -> TestNetwork:
        net = TestNetwork(**kw)
        made.append(net)
        return net.up(n)

    try:
        yield make
    finally:
        for net in made:
            net.down()


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
