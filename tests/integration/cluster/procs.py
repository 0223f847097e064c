"""Control-plane nodes as real processes (``python -m floydd.cluster.devnode --events``).

Shared by the netns system test and the cluster benchmarks: make a CA and node identities
in a folder, start nodes (optionally through a launcher such as a netns host's ``popen``),
read their JSON event lines on a thread, wait for events, kill -9 and restart them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from floydd.security.identity import NodeIdentity, init_cluster
from tests.conftest import free_ports

__all__ = ["make_identities", "free_ports", "DevNode"]

ROOT = Path(__file__).resolve().parents[3]


def make_identities(root: Path, n: int, addresses: Iterable[str] = ("127.0.0.1",)) -> list[Path]:
    """A CA and ``n`` node identities under ``root``; returns their identity folders."""
    addresses = list(addresses)
    ca, first = init_cluster(root / "ca", root / "tls1", "bench", addresses)
    folders = [first.folder]
    for i in range(2, n + 1):
        me = NodeIdentity.load_or_create(root / f"tls{i}")
        me.install(ca.issue_node_cert(me.make_csr(), me.node_id, addresses), ca.cert_pem)
        folders.append(me.folder)
    return folders


def node_id(tls: Path) -> str:
    return (Path(tls) / "node-id").read_text().strip()


class DevNode:
    """One devnode process; ``events`` are its JSON lines, parsed, in arrival order."""

    def __init__(self, tls: Path, state: Path, listen: str, *, args: Iterable[str] = (),
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen, log_path: Path | None = None) -> None:
        self.tls, self.state, self.listen = Path(tls), Path(state), listen
        self.node_id = node_id(tls)
        self.argv = [sys.executable, "-m", "floydd.cluster.devnode", "--tls", str(tls), "--state", str(state),
                     "--listen", listen, "--events", *args]
        self._popen = popen
        self.log_path = log_path or self.state.parent / f"{self.state.name}.log"
        self.events: list[dict] = []
        self.proc: subprocess.Popen | None = None
        self._cond = threading.Condition()

    def __repr__(self) -> str:
        return f"DevNode({self.node_id[:6]} at {self.listen})"

    def start(self, *extra: str) -> DevNode:
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = self._popen([*self.argv, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=log, cwd=ROOT)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True, name=f"read-{self.node_id[:6]}").start()
        return self

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()

    def wait(self, pred: Callable[[dict], bool], timeout: float, what: str = "event", after: float = 0.0) -> dict:
        """The first event (with ``t`` >= ``after``) for which ``pred`` holds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if e["t"] >= after and pred(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc is not None and self.proc.poll() is not None):
                    tail = self.log_path.read_text()[-2000:] if self.log_path.exists() else ""
                    raise TimeoutError(f"{self}: no {what} within {timeout}s\n{tail}")
                self._cond.wait(min(left, 0.1))

    def send(self, command: str) -> None:
        self.proc.stdin.write((command + "\n").encode())
        self.proc.stdin.flush()

    def kill9(self) -> float:
        """SIGKILL; returns the monotonic time it was sent."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        return t

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.send("leave")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
