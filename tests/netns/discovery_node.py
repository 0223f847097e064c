"""``python -m floydd.cluster.net.discovery --json`` in a test host, with its peer lists as they change.

Every line the node prints carries ``t``, its ``time.monotonic()`` (one clock for the whole
machine, every namespace), so tests and benchmarks can time arrivals across hosts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.netns.network import Host

__all__ = ["DiscoveryNode"]


class DiscoveryNode:
    """One discovery process; ``events`` are its JSON lines, parsed, in order."""

    def __init__(self, host: Host, node_id: str, fingerprint: str, *, log_dir: Path,
                 query_interval: float = 0.5, expire_after: float = 2.0, extra: tuple[str, ...] = ()) -> None:
        self.host = host
        self.node_id = node_id
        self.fingerprint = fingerprint
        self.argv = [sys.executable, "-m", "floydd.cluster.net.discovery", "--json", "--fingerprint", fingerprint,
                     "--node-id", node_id, "--interface", host.ip, "--query-interval", str(query_interval),
                     "--expire-after", str(expire_after), "--log-level", "info", *extra]
        self.log_path = Path(log_dir) / f"discovery-{node_id}.log"
        self.events: list[dict] = []
        self.t_spawn: float | None = None
        self.proc: subprocess.Popen | None = None
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"DiscoveryNode({self.node_id} in {self.host.ns})"

    def start(self) -> DiscoveryNode:
        with open(self.log_path, "ab") as log:
            self.t_spawn = time.monotonic()
            self.proc = self.host.popen(self.argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self._reader = threading.Thread(target=self._read, name=f"read-{self.node_id}", daemon=True)
        self._reader.start()
        return self

    def peers(self) -> set[str]:
        """Node ids in the latest peer list."""
        with self._changed:
            return self._peers()

    def _peers(self) -> set[str]:
        lists = [e["peers"] for e in self.events if e["event"] == "peers"]
        return {p["node_id"] for p in lists[-1]} if lists else set()

    def wait(self, cond: Callable[[set[str]], bool], timeout: float, what: str, *,
             after: float | None = None) -> float:
        """Block until a peer list (printed at or after ``after``) satisfies ``cond(node ids)``;
        return the node's ``t`` for that list."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for e in self.events:
                    if e["event"] == "peers" and (after is None or e["t"] >= after) \
                            and cond({p["node_id"] for p in e["peers"]}):
                        return e["t"]
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self}: no {what} within {timeout}s; peers now {self._peers()}\n"
                                         f"{self.log_tail()}")
                self._changed.wait(left)

    def wait_event(self, name: str, timeout: float) -> dict:
        """Block until the node printed ``{"event": name}`` (``started``, ``closed``)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(e["event"] == name for e in self.events):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self}: no {name!r} event within {timeout}s\n{self.log_tail()}")
                self._changed.wait(min(left, 0.5))
            return next(e for e in self.events if e["event"] == name)

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM: the node says goodbye, then exits."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill9(self) -> int:
        """SIGKILL: gone without a goodbye, as a box losing power."""
        self.proc.kill()
        return self.proc.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()
