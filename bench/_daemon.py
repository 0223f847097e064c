"""A throwaway real daemon for benchmarks: its own state dir, stopped at exit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from floydd.client import Client
from floydd.config import socket_path_for

FINAL = {"success", "failed", "stopped", "timeout", "lost"}


@contextlib.contextmanager
def serve(state: Path, log: Path, *extra: str, env: dict | None = None,
          timeout: float = 30) -> Iterator[tuple[Client, subprocess.Popen]]:
    """A daemon on ``state`` (made if absent, kept after), logging to ``log``; SIGTERM at exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state),
                                 *extra], env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    client = Client(socket_path_for(state))
    deadline = time.monotonic() + timeout
    while not client.ping():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"daemon on {state} did not start:\n" + Path(log).read_text()[-2000:])
        time.sleep(0.05)
    try:
        yield client, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)


@contextlib.contextmanager
def daemon(*extra: str, env: dict | None = None) -> Iterator[tuple[Client, subprocess.Popen, Path]]:
    """A daemon on a throwaway state dir, with a project folder ``bench`` to run jobs from."""
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp:
        project = Path(tmp) / "proj"
        project.mkdir()
        (project / ".floyd").write_text(json.dumps({"project": "bench"}))
        with serve(Path(tmp) / "state", Path(tmp) / "daemon.log", "--log-level", "warning", *extra,
                   env=env) as (client, proc):
            yield client, proc, project


def wait_final(client: Client, key: str, timeout: float = 600) -> dict:
    return client.wait(key, timeout=timeout)


def free_port() -> int:
    """A loopback TCP port nothing listens on now (a box's own cluster or API port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def floydd_cli(state: Path, *args: str) -> str:
    """``floydd ARGS --state-dir STATE`` (init, token create, join, ...): its stdout, or exit
    saying what failed."""
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", *args, "--state-dir", str(state)],
                         capture_output=True, text=True, timeout=120)
    if res.returncode:
        raise SystemExit(f"floydd {' '.join(args)} failed: {res.stderr}")
    return res.stdout.strip()
