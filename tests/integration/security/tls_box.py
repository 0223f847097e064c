"""A cluster of one on loopback serving its TLS API, for tests that call it as people do."""

from __future__ import annotations

import asyncio
import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from click.testing import CliRunner

from floydd.cli.floydd import cli as floydd
from floydd.client import Client
from floydd.config import preset_for_tests
from floydd.daemon.cluster_files import read_settings, write_settings
from floydd.daemon.main import serve
from tests.conftest import wait_until

__all__ = ["tls_box", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def tls_box(tmp: Path, **overrides) -> Iterator[tuple[Client, str, Path]]:
    """A cluster of one on loopback: its socket client, its TLS API address, its state dir
    (``overrides``: config settings)."""
    state = tmp / "state"
    peer, api = free_port(), free_port()
    res = CliRunner().invoke(floydd, ["init", "--state-dir", str(state), "--name", "lab", "--listen",
                                      f"127.0.0.1:{peer}", "--advertise", f"127.0.0.1:{peer}",
                                      "--api-listen", f"127.0.0.1:{api}"])
    assert res.exit_code == 0, res.output
    settings = read_settings(state)
    settings.discovery = False                 # no mDNS beyond loopback from a test
    write_settings(state, settings)
    config = preset_for_tests(state, dev_fake_gpus="1", sandbox="none", **overrides)
    loop, stop, ready, failed = asyncio.new_event_loop(), None, None, []

    def run() -> None:
        nonlocal stop, ready
        asyncio.set_event_loop(loop)
        stop, ready = asyncio.Event(), asyncio.Event()
        try:
            loop.run_until_complete(serve(config, stop, ready))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="remote-floydd", daemon=True)
    thread.start()
    local = Client(config.socket_path, timeout=60)
    try:
        wait_until(lambda: failed or (ready is not None and ready.is_set()), 60, what="the daemon to serve")
        if failed:
            raise failed[0]
        yield local, f"127.0.0.1:{api}", state
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(60)
