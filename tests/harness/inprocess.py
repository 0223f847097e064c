"""An in-process daemon: the real daemon served from a thread of the test, on a loop of its own.

- :func:`running` runs :func:`floydd.daemon.main.serve` (what ``floydd start`` runs) on a
  config and yields its :class:`~floydd.client.Client` on the unix socket;
- :func:`tls_box` is a cluster of one on loopback (``floydd init``, no mDNS) run the same way,
  for tests that call its TLS API as people do;
- :func:`serve` / :func:`serve_on` serve an aiohttp app (``create_app`` or a part of the
  daemon) with ``web.run_app`` on 127.0.0.1 or a bound socket.

Each waits until the daemon answers, raises a daemon's failure to start in the test's thread,
and stops it (and checks it stopped) at the end. Everything it writes is under the state
folder the test gives.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import requests
from aiohttp import web
from click.testing import CliRunner

from floydd.cli.floydd import cli as floydd_cli
from floydd.client import Client
from floydd.config import Config, preset_for_tests
from floydd.daemon.cluster_files import read_settings, write_settings
from floydd.daemon.main import serve as serve_daemon
from floydd.records import Records
from tests.conftest import free_ports
from tests.harness.wait import wait_until

__all__ = ["running", "tls_box", "serve", "serve_on"]


@contextmanager
def _in_thread(main: Callable[[asyncio.AbstractEventLoop], None], up: Callable[[], object],
               stop: Callable[[], None], name: str) -> Iterator[asyncio.AbstractEventLoop]:
    """Run ``main(loop)`` in a thread until ``up()``; on the way out, ``stop()`` in the loop."""
    loop, failed = asyncio.new_event_loop(), []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            main(loop)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            failed.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        wait_until(lambda: failed or up(), 60, what=f"{name} to answer")
        if failed:
            raise failed[0]
        yield loop
    finally:
        if thread.is_alive():
            try:
                loop.call_soon_threadsafe(stop)
            except RuntimeError:        # the loop closed meanwhile: it stopped by itself
                pass
        thread.join(60)
        assert not thread.is_alive(), f"{name} did not stop"


@contextmanager
def running(config: Config, name: str = "floydd-under-test") -> Iterator[Client]:
    """The daemon ``floydd start`` runs, on ``config``; its client on the unix socket."""
    ready, stopping = threading.Event(), asyncio.Event()

    def main(loop: asyncio.AbstractEventLoop) -> None:
        loop.run_until_complete(serve_daemon(config, stopping, ready))     # type: ignore[arg-type]

    with _in_thread(main, ready.is_set, stopping.set, name):
        yield Client(config.socket_path, timeout=60)


@contextmanager
def tls_box(tmp: Path, **overrides) -> Iterator[tuple[Client, str, Path]]:
    """A cluster of one on loopback: its socket client, its TLS API address, its state dir
    (``overrides``: config settings)."""
    state = tmp / "state"
    peer, api = free_ports(2)
    res = CliRunner().invoke(floydd_cli, ["init", "--state-dir", str(state), "--name", "lab", "--listen",
                                          f"127.0.0.1:{peer}", "--advertise", f"127.0.0.1:{peer}",
                                          "--api-listen", f"127.0.0.1:{api}"])
    assert res.exit_code == 0, res.output
    settings = read_settings(state)
    settings.discovery = False                 # no mDNS beyond loopback from a test
    write_settings(state, settings)
    config = preset_for_tests(state, dev_fake_gpus="1", sandbox="none", **overrides)
    with running(config, name="remote-floydd") as local:
        yield local, f"127.0.0.1:{api}", state


@contextmanager
def serve(app: web.Application) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) with ``web.run_app`` in a thread; its base URL.
    A daemon that fails to start raises its error here."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    with serve_on(app, sock, lambda: _answers(url)):
        yield url


@contextmanager
def serve_on(app: web.Application, sock: socket.socket, answers, name: str = "api-floydd"
             ) -> Iterator[asyncio.AbstractEventLoop]:
    """``web.run_app`` of ``app`` on the bound ``sock`` in a thread, until ``answers()``; its
    loop. A daemon that fails to start raises its error here; ``sock`` is closed after."""
    def main(loop: asyncio.AbstractEventLoop) -> None:
        web.run_app(app, sock=sock, loop=loop, handle_signals=False, print=None, access_log=None)

    try:
        with _in_thread(main, answers, _stop, name) as loop:
            yield loop
    finally:
        sock.close()


def _answers(url: str) -> bool:
    try:
        return requests.get(url + "/v1/openapi.json", timeout=5).status_code == 401   # up, and asks for a token
    except requests.ConnectionError:
        return False


def _stop() -> None:
    raise web.GracefulExit()      # as run_app's own signal handler stops it


def add_old_run(records_path: Path) -> None:
    """A job this node ran before it had a control plane (attempt 0): only in its records."""
    records_path.parent.mkdir(parents=True, exist_ok=True)
    records = Records(records_path)
    try:
        records.insert_job("old", 3, {"command": "python old.py", "attempt": 0, "created": time.time() - 60,
                                      "params": {"lr": "0.3"}, "resources": {"gpus": 0, "cpu": True},
                                      "node": "test-node", "user": "someone"})
        for state in ("starting", "running", "success"):
            records.set_state("old", 3, state, "exit code 0" if state == "success" else "")
        records.add_metrics("old", 3, [("loss", 0.7, 0, time.time()), ("loss", 0.4, 1, time.time())])
    finally:
        records.close()
