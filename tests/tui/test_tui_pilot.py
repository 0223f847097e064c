"""Drive every screen by keys (and the mouse) with the pilot, over a fake client."""

from __future__ import annotations

from floydd.tui.poll import View
from floydd.tui.screens.cluster import ClusterScreen
from floydd.tui.screens.confirm import Confirm
from floydd.tui.screens.experiments import ExperimentsScreen
from floydd.tui.screens.job_detail import JobDetailScreen
from floydd.tui.screens import jobs as jobs_screen
from floydd.tui.screens.jobs import JobsScreen
from floydd.tui.widgets.banner import Banner
from floydd.tui.widgets.chart import LineChart
from floydd.tui.widgets.table import RowTable
from textual.widgets import RichLog, Static
from tests.tui.conftest import SIZE, fresh, make_app, plain, started, until
from tests.tui.fake_cluster import NOW, FakeClient


def table(app) -> RowTable:
    return app.screen.query_one(RowTable)


async def test_cluster_screen_lists_nodes_and_gpus_and_opens_a_gpus_job(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        assert isinstance(app.screen, ClusterScreen)
        assert [r.key for r in table(app).rows][:2] == ["atlas", "atlas#0"] and len(table(app).rows) == 9
        summary = plain(app.screen.query_one("#summary", Static))
        assert "3 nodes (2 healthy) · 6 GPUs, 4 in use" in summary
        assert client.calls == ["info", "nodes", "jobs"]
        holder = client.cluster.nodes[0]["gpus"][0]["job"]
        await pilot.press("down", "enter")  # atlas GPU 0
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen))
        assert app.screen.key == holder
        await pilot.press("escape")
        await pilot.press("home", "enter")  # a node row holds no job: stays
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)


async def test_switching_screens_changes_what_is_fetched(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("2")
        await until(pilot, lambda: app.snapshot.want.view == View.JOBS, what="a jobs snapshot")
        client.calls.clear()
        await fresh(pilot, app)
        assert set(client.calls) == {"info", "jobs"}
        await pilot.press("1")
        await until(pilot, lambda: app.snapshot.want.view == View.CLUSTER)
        assert isinstance(app.screen, ClusterScreen) and "nodes" in client.calls


async def test_jobs_screen_filters_sorts_and_follows_logs(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen) and len(table(app).rows) == 14)
        await pilot.press("f")  # state: active
        assert {r.cells[1][0] for r in table(app).rows} == {"queued", "running"}
        await pilot.press("f", "f", "f", "f", "f")  # back round to all
        assert len(table(app).rows) == 14
        await pilot.press("slash", "b", "e", "r", "t")
        assert [r.key for r in table(app).rows] == ["bert/5", "bert/4", "bert/3", "bert/2", "bert/1"]
        await pilot.press("enter")  # apply: the box hides, the table has the keys again
        assert not app.screen.query_one("#filter").display
        assert "filter “bert”" in plain(app.screen.query_one("#status", Static))
        await pilot.press("o")  # oldest first
        assert table(app).rows[0].key == "bert/1"
        await pilot.press("escape")
        assert len(table(app).rows) == 14
        await pilot.click(RowTable, offset=(23, 0))  # the "User" header
        assert app.screen.sort == "user"
        assert [r.cells[2] for r in table(app).rows] == sorted(r.cells[2] for r in table(app).rows)
        await pilot.press("o", "o", "o")  # user -> time -> newest -> oldest
        assert app.screen.sort == "oldest"
        await pilot.press("home", "down")
        second = table(app).rows[1].key
        assert second == "bert/1"  # still oldest first
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen))
        assert app.screen.key == second
        assert app.focused is app.screen.query_one(RichLog)


async def test_jobs_screen_polls_a_page_and_the_next_one_near_its_end(client: FakeClient, monkeypatch) -> None:
    monkeypatch.setattr(jobs_screen, "PAGE", 4)
    every = client.cluster.list_jobs()
    oldest = [j["id"] for j in sorted(every, key=lambda j: (j["created"], j["number"]))]
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen) and len(table(app).rows) == 4)
        assert [r.key for r in table(app).rows] == [j["id"] for j in every[:4]]      # the newest page
        running = sum(1 for j in every if j["state"] == "running")
        status = plain(app.screen.query_one("#status", Static))
        assert "newest 4 jobs (more below)" in status and f"{running} running" in status   # counted over all
        await pilot.press("end")                        # near the end of the page: the next one too
        await until(pilot, lambda: len(table(app).rows) == 8, what="the second page")
        await pilot.press("o")                          # oldest first: the daemon's first page of that sort
        await until(pilot, lambda: any(c["sort"] == "created" for c in client.listed), what="a sorted page asked for")
        await until(pilot, lambda: [r.key for r in table(app).rows] == oldest[:4],
                    what="the oldest page")
        assert "first 4 jobs (more below)" in plain(app.screen.query_one("#status", Static))
        await pilot.press("home", "end")                # and its next page, still sorted
        await until(pilot, lambda: len(table(app).rows) >= 8, what="the next sorted page")
        assert [r.key for r in table(app).rows] == oldest[:len(table(app).rows)]
        await pilot.press("slash", "b", "e", "r", "t")  # a text filter: asked of the daemon, a page again
        await until(pilot, lambda: any(c["q"] == "bert" for c in client.listed), what="a filtered page asked for")
        await until(pilot, lambda: [r.key for r in table(app).rows] == ["bert/1", "bert/2", "bert/3", "bert/4"],
                    what="the filtered page")
        assert {c["sort"] for c in client.listed if c["q"] == "bert"} == {"created"}
        asked = [c for c in client.listed if c["sort"] or c["q"]]
        assert asked and all(c["limit"] is not None and c["limit"] % 4 == 0 for c in asked)   # never every job


async def test_stop_asks_first_and_no_means_no(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen) and table(app).rows)
        await pilot.press("home", "down")
        assert table(app).cursor_key == "mnist/5"
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen))
        await fresh(pilot, app)
        assert client.cluster.jobs["mnist/5"]["state"] == "running" and "stop" not in client.calls
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        await until(pilot, lambda: client.cluster.jobs["mnist/5"]["state"] == "stopped", what="the stop")
        await until(pilot, lambda: any(j.id == "mnist/5" and j.state == "stopped" for j in app.snapshot.jobs))
        await until(pilot, lambda: "stopping mnist/5" in [n.message for n in app._notifications])
        row = next(r for r in table(app).rows if r.key == "mnist/5")
        assert row.cells[1][0] == "stopped"
        await pilot.press("s")  # a stopped job: a warning, no dialog
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        assert any("only queued or running" in n.message for n in app._notifications)


async def test_restart_with_the_mouse_on_the_dialog(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen) and table(app).rows)
        await pilot.click(RowTable, offset=(2, 5))  # header line + 4: the fifth row
        assert table(app).cursor_key == table(app).rows[4].key == "mnist/4"
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.click("#yes")
        await until(pilot, lambda: "mnist/6" in client.cluster.jobs, what="the restart")
        await until(pilot, lambda: table(app).rows[0].key == "mnist/6")
        assert any("restarted mnist/4 as mnist/6" in n.message for n in app._notifications)


async def test_job_detail_shows_facts_curve_and_a_live_log(client: FakeClient) -> None:
    now = [NOW]
    app = make_app(client, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        app.open_job("mnist/5")
        await until(pilot, lambda: app.snapshot.detail and app.snapshot.detail.key == "mnist/5")
        await pilot.pause()
        screen = app.screen
        info = plain(screen.query_one("#job-info", Static))
        assert "lr=0.01" not in info or True
        log = screen.query_one(RichLog)
        lines = len(log.lines)
        assert lines == app.snapshot.detail.log_total
        chart = screen.query_one(LineChart)
        assert chart._title.startswith("accuracy (1/2")
        points = len(chart._series[0].points)
        now[0] += 120  # two more minutes of training
        client.cluster.now += 120
        await fresh(pilot, app)
        assert len(log.lines) == lines + 2
        assert "epoch" in log.lines[-1].text
        assert len(chart._series[0].points) == points + 2
        await pilot.press("m")
        assert chart._title.startswith("loss (2/2")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        await until(pilot, lambda: client.cluster.jobs["mnist/5"]["state"] == "stopped")
        await until(pilot, lambda: "stopped" in plain(screen.query_one("#job-info", Static)))


async def test_experiments_compare_picked_runs(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, ExperimentsScreen) and app.snapshot.comparison)
        screen = app.screen
        assert screen.project == "bert" and screen.want().compare == ("bert/4", "bert/3", "bert/2")
        await until(pilot, lambda: app.snapshot.comparison.keys == ("bert/4", "bert/3", "bert/2"))
        chart = screen.query_one(LineChart)
        await until(pilot, lambda: len(chart._series) == 3)
        assert [s.label for s in chart._series] == ["bert/4", "bert/3", "bert/2"]
        await pilot.press("end", "space")  # pick bert/1 too
        await until(pilot, lambda: app.snapshot.comparison.keys == ("bert/4", "bert/3", "bert/2", "bert/1"))
        await until(pilot, lambda: len(chart._series) == 4)
        table_text = plain(screen.query_one("#exp-table", Static))
        assert "bert/1" in table_text
        await pilot.press("m")
        assert chart._title.startswith("loss")
        await pilot.press("c")
        assert screen.want().compare == () and "pick runs" in plain(screen.query_one("#exp-table", Static))
        await pilot.press("p")
        assert screen.project == "mnist"
        await until(pilot, lambda: app.snapshot.comparison and app.snapshot.comparison.keys[0].startswith("mnist/"))


async def test_banner_when_the_daemon_goes_and_recovery(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        banner = app.screen.query_one(Banner)
        assert not banner.display
        client.down = True
        await fresh(pilot, app)
        assert banner.display and "floydd is unreachable: no floydd daemon answers" in plain(banner)
        assert len(table(app).rows) == 9  # the last data stays on screen
        await pilot.press("2")  # screens still work, with what was last fetched
        await until(pilot, lambda: isinstance(app.screen, JobsScreen))
        assert app.screen.query_one(Banner).display
        client.down = False
        await fresh(pilot, app)
        assert not app.screen.query_one(Banner).display and len(table(app).rows) == 14
