"""``floyd status``'s table and its ``--since``: fast, aligned, cut only on a terminal."""

from __future__ import annotations

import time

import pytest

from floydd.cli.jobs import _status_table, since_time
from floydd.cli.table import cut, render
from floydd.errors import UserError
from floydd.answers import decode_job
from floydd.model import JobView


def _job(n: int, **kw) -> JobView:
    job = {"id": f"p/{n}", "project": "p", "number": n, "state": "success", "gpus": [0], "resources": {"gpus": 1},
           "started": 10.0, "ended": 70.0, "metrics": {"loss": {"last": 0.25}}, "message": f"run {n}", "node": "box1",
           "parts": []}
    return decode_job({**job, **kw})


def test_columns_line_up_and_wide_characters_count_twice():
    text = render(["JOB", "MESSAGE"], [["p/1", "训练"], ["p/10", "x"]])
    lines = text.splitlines()
    assert lines == ["JOB   MESSAGE", "────  ───────", "p/1   训练", "p/10  x"]


def test_only_the_last_column_is_cut_and_only_to_a_width():
    rows = [["p/1", "a" * 100]]
    assert render(["JOB", "MESSAGE"], rows).splitlines()[2].endswith("a" * 100)      # piped: whole
    assert render(["JOB", "MESSAGE"], rows, width=30).splitlines()[2] == "p/1  " + "a" * 24 + "…"
    assert cut("line one\nline two", 40) == "line one line two"


def test_ten_thousand_rows_render_without_quadratic_work():
    headers, rows = _status_table([_job(n) for n in range(10_000)])
    t0 = time.perf_counter()
    text = render(headers, rows)
    # ~0.1 s on a quiet CI box; a guard against work per row growing with the rows (which would
    # take minutes), not a benchmark: loaded machines took over 0.5 s
    assert time.perf_counter() - t0 < 3.0 and text.count("\n") == 10_002
    assert "loss=0.25" in text and "1m" in text


def test_a_long_waiting_reason_does_not_widen_every_row():
    headers, rows = _status_table([_job(1, state="queued", waiting_for="waiting for 2 GPUs: " + "x" * 300,
                                        started=None), _job(2)])
    assert len(rows[0][1]) <= 60 and rows[0][1].endswith("…")


def test_since_takes_a_time_ago_or_a_date():
    now = 1_700_000_000.0
    assert since_time("2h", now) == now - 7200 and since_time("1.5d", now) == now - 1.5 * 86400
    assert since_time("30m", now) == now - 1800 and since_time("1w", now) == now - 7 * 86400
    assert since_time("2024-05-01") == time.mktime((2024, 5, 1, 0, 0, 0, 0, 0, -1))
    with pytest.raises(UserError):
        since_time("yesterday")
