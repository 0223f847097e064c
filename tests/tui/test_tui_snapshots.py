"""SVG snapshots of every screen with fixed data and a fixed clock.

Update after looking at the change: ``pytest tests/tui --snapshot-update``
(the files are under tests/tui/__snapshots__/).
"""

from __future__ import annotations

from floydd.tui.screens.confirm import Confirm
from floydd.tui.screens.experiments import ExperimentsScreen
from floydd.tui.screens.jobs import JobsScreen
from floydd.tui.widgets.chart import LineChart
from textual.widgets import RichLog
from tests.tui.conftest import SIZE, fresh, make_app, started, until
from tests.tui.fake_cluster import FakeClient


def test_cluster_screen(snap_compare, client: FakeClient) -> None:
    app = make_app(client, history=20)

    async def ready(pilot) -> None:
        await started(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def on_jobs_screen(app):
    async def ready(pilot) -> None:
        await started(pilot, app)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen) and app.snapshot.all_jobs)
    return ready


def test_jobs_screen(snap_compare, client: FakeClient) -> None:
    app = make_app(client)
    assert snap_compare(app, terminal_size=SIZE, run_before=on_jobs_screen(app))


def test_jobs_screen_active_only_sorted_by_time(snap_compare, client: FakeClient) -> None:
    app = make_app(client)
    assert snap_compare(app, terminal_size=SIZE, run_before=on_jobs_screen(app), press=["f", "o", "o", "o", "o", "o"])


def test_stop_confirmation(snap_compare, client: FakeClient) -> None:
    app = make_app(client)

    async def ready(pilot) -> None:
        await on_jobs_screen(app)(pilot)
        await pilot.press("down", "s")
        await until(pilot, lambda: isinstance(app.screen, Confirm))

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_job_detail_screen(snap_compare, client: FakeClient) -> None:
    app = make_app(client)

    async def ready(pilot) -> None:
        await started(pilot, app)
        app.open_job("mnist/5")
        await until(pilot, lambda: app.snapshot.detail and app.snapshot.detail.key == "mnist/5")
        await until(pilot, lambda: len(app.screen.query_one(RichLog).lines) == app.snapshot.detail.log_total)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_experiments_screen(snap_compare, client: FakeClient) -> None:
    app = make_app(client)

    async def ready(pilot) -> None:
        await started(pilot, app)
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, ExperimentsScreen)
                    and len(app.screen.query_one(LineChart)._series) == 3)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_daemon_unreachable_banner(snap_compare, client: FakeClient) -> None:
    app = make_app(client, history=5)

    async def ready(pilot) -> None:
        await started(pilot, app)
        client.down = True
        await fresh(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)
