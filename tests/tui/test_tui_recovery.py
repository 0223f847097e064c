"""Against the stub API on a real unix socket: the daemon dies, the banner shows, it comes back."""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.errors import Unavailable
from floydd.tui.app import FloydTop, main
from floydd.tui.connection import Reconnecting
from floydd.tui.serve import parse_address
from floydd.tui.widgets.banner import Banner
from floydd.tui.widgets.table import RowTable
from tests.tui.conftest import SIZE, plain, until
from tests.tui.fake_cluster import NOW, FakeCluster
from tests.tui.stub_api import StubServer


@pytest.fixture
def socket_path():
    with tempfile.TemporaryDirectory(prefix="ftui") as tmp:  # short: unix socket paths are limited
        yield Path(tmp) / "api.sock"


async def test_banner_while_the_daemon_is_gone_and_recovery_on_the_same_socket(socket_path: Path) -> None:
    cluster = FakeCluster()
    server = StubServer(cluster, socket_path).start()
    connects = []

    def connect() -> Client:
        connects.append(1)
        client = Client(socket_path)
        client.info()  # as floydd.cli.common.connect does: only a daemon that answers
        return client

    app = FloydTop(Reconnecting(connect), clock=lambda: NOW, refresh=0.05)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot and app.snapshot.reachable and app.snapshot.nodes)
            assert len(app.screen.query_one(RowTable).rows) == 9
            banner = app.screen.query_one(Banner)
            assert not banner.display
            server.stop()
            await until(pilot, lambda: banner.display, what="the banner")
            # a poll caught mid-request may first say "did not answer in time"; the next ones say why
            await until(pilot, lambda: f"no floydd daemon answers at {socket_path}" in plain(banner),
                        what="the reason in the banner")
            assert len(app.screen.query_one(RowTable).rows) == 9  # last data kept
            cluster.nodes[1]["health"] = "stale"  # changed while it was away
            server.start()
            await until(pilot, lambda: not banner.display, what="recovery")
            await until(pilot, lambda: app.screen.query_one(RowTable).rows[5].cells[2] == ("stale", "yellow"))
            assert len(connects) >= 2  # it looked for the daemon again
            assert app.is_running and app._exception is None
    finally:
        server.stop()


async def test_it_opens_without_a_daemon_and_says_so() -> None:
    def nobody() -> Client:
        raise Unavailable("no floydd daemon answers at /nowhere/api.sock", hint="start one with `floydd start`")

    app = FloydTop(Reconnecting(nobody), clock=lambda: NOW, refresh=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.polls >= 2 and app.screen.query(Banner))
        banner = app.screen.query_one(Banner)
        await until(pilot, lambda: banner.display)
        text = plain(banner)
        assert "no floydd daemon answers at /nowhere/api.sock — start one with `floydd start`" in text
        assert "no data yet" in text
        await pilot.press("2", "3", "1")  # every screen still opens
        await pilot.pause()
        assert app.is_running


def test_stub_api_speaks_the_clients_language(socket_path: Path) -> None:
    with StubServer(FakeCluster(), socket_path):
        client = Client(socket_path)
        assert client.info()["cluster_size"] == 3
        assert [j["id"] for j in client.jobs(project="bert", state="success")] == ["bert/3", "bert/2", "bert/1"]
        lines = list(client.logs("bert/1", offset=0))
        assert lines[0].endswith(b"\n") and b"loading data" in lines[0]
        assert list(client.logs("bert/1", offset=sum(map(len, lines)))) == []
        client.stop("mnist/5")
        with pytest.raises(Exception) as err:
            client.stop("mnist/5")
        assert type(err.value).__name__ == "Conflict" and "not running" in str(err.value)
        assert client.compare(["bert/1", "bert/2"])["params"] == ["batch", "lr", "optimizer"]


def test_main_takes_the_cli_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = []
    monkeypatch.setattr(FloydTop, "run", lambda self: ran.append(self))
    main(["--refresh", "0.5"])
    assert ran[0].refresh_seconds == 0.5 and isinstance(ran[0].poller.client, Reconnecting)
    with pytest.raises(SystemExit):
        main(["--refresh", "0"])
    served = []
    monkeypatch.setattr("floydd.tui.serve.serve",
                        lambda where, refresh, host=None: served.append((where, refresh, host)))
    main(["--serve"])
    main(["--serve", "0.0.0.0:9000", "--refresh", "2"])
    main(["--serve", "9001", "--host", "10.0.0.5"])
    assert served == [("127.0.0.1:8000", 1.0, None), ("0.0.0.0:9000", 2.0, None), ("9001", 1.0, "10.0.0.5")]
    assert parse_address(":8123") == ("127.0.0.1", 8123) and parse_address("[::1]:80") == ("::1", 80)
    with pytest.raises(SystemExit):
        parse_address("host:http")


def test_the_tui_double_and_the_reconnecting_client_take_the_same_arguments() -> None:
    """The poller is tested over the double and runs over Reconnecting (over floydd.client): a
    keyword one of them lacks is a TypeError on the banner of a real `floyd top` only."""
    from floydd.client import Client
    from tests.tui.fake_cluster import FakeClient

    for name in ("info", "nodes", "jobs", "job", "metrics", "compare", "stop", "restart", "logs"):
        double, real = inspect.signature(getattr(FakeClient, name)), inspect.signature(getattr(Reconnecting, name))
        assert list(double.parameters) == list(real.parameters), name
        keywords = {n for n, p in real.parameters.items() if p.kind is p.KEYWORD_ONLY or p.default is not p.empty}
        assert keywords <= set(inspect.signature(getattr(Client, name)).parameters), name
