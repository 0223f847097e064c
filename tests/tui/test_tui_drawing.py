"""Pure drawing helpers: text formats, bars, sparklines, the braille chart, row builders."""

from __future__ import annotations

from floydd.tui.format import bar, duration, job_seconds, metric_summary, spark, used_total
from floydd.tui.poll import Snapshot, View, Want
from floydd.tui.poller import Poller
from floydd.tui.screens.cluster import cluster_rows
from floydd.tui.screens.jobs import STATE_FILTERS, job_rows
from floydd.tui.widgets.banner import banner_text
from floydd.tui.widgets.chart import Series, plot_lines
from floydd.answers import decode_jobs
from tests.tui.fake_cluster import GIB, NOW, FakeClient, job_view, metric_view


def test_bar_fills_in_eighths() -> None:
    assert bar(0, 4) == "    "
    assert bar(100, 4) == "████"
    assert bar(50, 4) == "██  "
    assert bar(56.25, 4) == "██▎ "  # 18 eighths of 32
    assert bar(250, 3) == "███" and bar(None, 3) == "   "


def test_spark_keeps_the_newest_on_the_right() -> None:
    assert spark([0, 100], 4) == "  ▁█"
    assert spark([0, 50, 100], 3) == "▁▄█"
    assert spark(range(0, 101, 10), 3) == "▇██"
    assert spark([], 2) == "  "


def test_sizes_and_durations() -> None:
    assert used_total(12 * GIB + GIB // 2, 48 * GIB) == "12.5/48.0 GiB"
    assert used_total(None, 10) == "-"
    assert [duration(s) for s in (5, 65, 3725, 90000)] == ["5s", "1m05s", "1h02m", "1d01h"]
    assert job_seconds(job_view(started=10.0, ended=70.0), now=1000) == 60.0
    assert job_seconds(job_view(started=10.0, ended=None), now=100) == 90.0
    assert job_seconds(job_view(created=50.0, started=None), now=100) == 50.0  # waiting so far


def test_metric_summary_is_sorted_and_short() -> None:
    assert metric_summary({"loss": metric_view(0.123456), "acc": metric_view(0.9)}) == "acc 0.9 · loss 0.1235"
    assert metric_summary({}) == ""


def test_chart_draws_a_rising_line_from_bottom_left_to_top_right() -> None:
    text = plot_lines([Series("a", tuple((float(x), float(x)) for x in range(50)), "cyan")], 40, 10, "t")
    lines = text.plain.split("\n")
    assert lines[0].startswith("t  ■ a") and len(lines) == 10
    plot = [line[10:] for line in lines[1:-1]]
    first = [next(i for i, ch in enumerate(row) if ch != " ") for row in plot]
    assert first == sorted(first, reverse=True)  # higher rows start further right
    assert plot[-1][0] != " " and plot[0][-1] != " "
    assert lines[1].strip().startswith("49") and lines[-2].strip().startswith("0 ")
    assert lines[-1].split() == ["0", "49"]


def test_overlaid_series_keep_their_colours() -> None:
    up = Series("up", ((0.0, 0.0), (10.0, 10.0)), "cyan")
    down = Series("down", ((0.0, 10.0), (10.0, 0.0)), "magenta")
    text = plot_lines([up, down], 30, 8)
    colours = {str(span.style) for span in text.spans}
    assert {"cyan", "magenta"} <= colours
    assert "no data yet" in plot_lines([Series("x", ())], 30, 8).plain


def test_cluster_rows_put_gpus_under_their_node_with_their_job(client: FakeClient) -> None:
    snap = Poller(client, clock=lambda: NOW).poll(Want())
    rows = cluster_rows(snap)
    assert [r.key for r in rows] == ["atlas", "atlas#0", "atlas#1", "atlas#2", "atlas#3",
                                     "boreas", "boreas#0", "boreas#1", "cyrene"]
    gpu0 = rows[1].cells
    holder = client.cluster.nodes[0]["gpus"][0]["job"]
    user = client.cluster.jobs[holder]["user"]
    assert gpu0[-1][0] == f"{holder} · {user}"
    assert rows[6].cells[-1] == ("idle", "dim")
    assert "no GPUs" in rows[-1].cells[-1][0] and rows[-1].cells[2] == ("stale", "yellow")


def test_job_rows_filter_and_sort(client: FakeClient) -> None:
    jobs = decode_jobs(client.jobs())
    assert [r.key for r in job_rows(jobs, NOW)][:3] == ["bert/5", "mnist/5", "resnet/4"]
    active = job_rows(jobs, NOW, states=STATE_FILTERS["active"])
    assert {r.cells[1][0] for r in active} == {"queued", "running"}
    assert [r.key for r in job_rows(jobs, NOW, text="BERT")] == ["bert/5", "bert/4", "bert/3", "bert/2", "bert/1"]
    assert [r.key for r in job_rows(jobs, NOW, text="lr=0.0003")] == ["resnet/3", "bert/3", "mnist/3"]
    assert [r.key for r in job_rows(jobs, NOW, sort="oldest")][:2] == ["mnist/1", "bert/1"]
    by_state = [r.cells[1][0] for r in job_rows(jobs, NOW, sort="state")]
    assert by_state[:4] == ["running", "running", "running", "queued"] and by_state[-1] == "success"
    by_time = [r.cells[5] for r in job_rows(jobs, NOW, sort="time")]
    assert by_time[0] == "1h29m"


def test_banner_says_what_is_wrong_and_how_old_the_data_is() -> None:
    snap = Snapshot(seq=3, now=NOW + 75, want=Want(view=View.JOBS), reachable=False, error="no daemon",
                    hint="start one", last_ok=NOW)
    assert banner_text(snap, 1.0).plain == ("⚠ floydd is unreachable: no daemon — start one\n"
                                           "  retrying every 1s; data shown is 1m15s old")
    assert banner_text(Snapshot(seq=1, now=NOW, want=Want(), reachable=True), 1.0) is None
    assert banner_text(None, 1.0).plain == "connecting to floydd…"


def test_a_distributed_job_shows_every_part_and_how_many_boxes_it_spans() -> None:
    from rich.console import Console

    from floydd.tui.screens.job_detail import job_panel
    from floydd.tui.screens.jobs import _cells
    job = job_view(id="p/7", state="running", node="box-a", gpus=[0], resources={"gpus": 1, "nodes": 2},
                   started=NOW - 60, command="python train.py",
                   parts=[{"rank": 0, "node": "box-a", "gpus": [0], "state": "running"},
                          {"rank": 1, "node": "box-b", "gpus": [3], "state": "starting"}])
    console = Console(width=100, record=True)
    console.print(job_panel(job, NOW))
    text = console.export_text()
    assert "rank 0 on box-a · GPUs 0 · running" in text and "rank 1 on box-b · GPUs 3 · starting" in text
    assert "box-a +1" in [cell if isinstance(cell, str) else cell[0] for cell in _cells(job, NOW)]
