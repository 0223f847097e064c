"""A throwaway real daemon for benchmarks: its own state dir, stopped at exit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
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
def daemon(*extra: str, env: dict | None = None) -> Iterator[tuple[Client, subprocess.Popen, Path]]:
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp:
        state = Path(tmp) / "state"
        log = open(Path(tmp) / "daemon.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state),
                                 "--log-level", "warning", *extra],
                                env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        client = Client(socket_path_for(state))
        deadline = time.monotonic() + 30
        while not client.ping():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("daemon did not start:\n" + (Path(tmp) / "daemon.log").read_text()[-2000:])
            time.sleep(0.05)
        project = Path(tmp) / "proj"
        project.mkdir()
        (project / ".floyd").write_text(json.dumps({"project": "bench"}))
        try:
            yield client, proc, project
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def wait_final(client: Client, key: str, timeout: float = 600) -> dict:
    return client.wait(key, timeout=timeout)
