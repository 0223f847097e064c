"""Metric points, summaries, events, system samples, log offsets; concurrency."""

from __future__ import annotations

import math
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from floydd.errors import InvalidSpec, NotFound
from floydd.records import Records


def test_metrics_round_trip_with_nan_and_missing_steps(records):
    n = records.allocate_job("p", {})
    assert records.add_metrics("p", n, [("loss", 0.9, 1, 10.0), ("acc", 1, None, 10.5),
                                        ("loss", float("nan"), 2, 11.0), ("loss", 0.4, 3, 12.0)]) == 4
    series = records.metric_series("p", n)
    assert list(series) == ["loss", "acc"]
    assert series["acc"] == [(None, 1.0, 10.5)]
    (s1, v1, t1), (s2, v2, t2), last = series["loss"]
    assert (s1, v1, t1, s2, t2, last) == (1, 0.9, 10.0, 2, 11.0, (3, 0.4, 12.0)) and math.isnan(v2)
    assert records.metric_series("p", n, "acc") == {"acc": [(None, 1.0, 10.5)]}
    assert records.metric_series("p", n, "nope") == {}
    assert records.metric_summary("p", n) == {
        "loss": {"last": 0.4, "last_step": 3, "last_ts": 12.0, "min": 0.4, "max": 0.9, "count": 3},
        "acc": {"last": 1.0, "last_step": None, "last_ts": 10.5, "min": 1.0, "max": 1.0, "count": 1}}


def test_all_nan_metric_has_no_min_max_and_a_nan_last(records):
    n = records.allocate_job("p", {})
    records.add_metrics("p", n, [("loss", float("nan"), 1, 1.0)])
    summary = records.metric_summary("p", n)["loss"]
    assert (summary["min"], summary["max"], summary["count"]) == (None, None, 1) and math.isnan(summary["last"])
    records.add_metrics("p", n, [("loss", 2.0, 2, 2.0)])
    assert records.metric_summary("p", n)["loss"] | {"last_ts": 0} == {
        "last": 2.0, "last_step": 2, "last_ts": 0, "min": 2.0, "max": 2.0, "count": 2}


@pytest.mark.parametrize("bad", [("loss", "high", 1, 1.0), ("loss", 0.1, 2.5, 1.0), ("loss", 0.1, 1, None),
                                 ("", 0.1, 1, 1.0), (None, 0.1, 1, 1.0)])
def test_a_bad_point_rejects_its_whole_batch(records, bad):
    n = records.allocate_job("p", {})
    with pytest.raises(InvalidSpec):
        records.add_metrics("p", n, [("fresh_name", 1.0, 1, 1.0), bad], log_offset=50)
    assert records.metric_series("p", n) == {} and records.get_log_offset("p", n) == 0
    # the name interned by the rolled-back batch must not leave a stale id behind
    records.add_metrics("p", n, [("fresh_name", 2.0, 1, 1.0)])
    assert records.metric_series("p", n) == {"fresh_name": [(1, 2.0, 1.0)]}


points = st.lists(st.tuples(st.sampled_from(["loss", "acc", "val/loss", "lr"]),
                            st.floats(allow_infinity=True, allow_nan=True, width=64) | st.integers(-10**6, 10**6),
                            st.none() | st.integers(0, 10**9),
                            st.floats(0, 2e9)), max_size=30)


@settings(max_examples=40, deadline=None)
@given(st.lists(points, min_size=1, max_size=4))
def test_series_and_summary_match_a_model(batches):
    with tempfile.TemporaryDirectory() as tmp, Records(Path(tmp) / "r.db") as records:
        other = records.allocate_job("p", {})
        n = records.allocate_job("p", {})
        records.add_metrics("p", other, [("loss", 123.0, 1, 1.0)])  # another job's points stay apart
        model: dict[str, list[tuple]] = {}
        for batch in batches:
            assert records.add_metrics("p", n, batch) == len(batch)
            for name, value, step, ts in batch:
                model.setdefault(name, []).append((step, float(value), ts))
        got = records.metric_series("p", n)
        assert got.keys() == model.keys()
        for name, series in model.items():
            assert [_key(p) for p in got[name]] == [_key(p) for p in series]
        summary = records.metric_summary("p", n)
        for name, series in model.items():
            finite = [v for _, v, _ in series if not math.isnan(v)]
            assert summary[name]["count"] == len(series)
            assert (summary[name]["min"], summary[name]["max"]) == ((min(finite), max(finite)) if finite else (None, None))
            assert _key((summary[name]["last_step"], summary[name]["last"], summary[name]["last_ts"])) == _key(series[-1])


def _key(point: tuple) -> tuple:
    step, value, ts = point
    return step, "nan" if math.isnan(value) else value, ts


def test_log_offset_set_get_and_with_metrics(records):
    n = records.allocate_job("p", {})
    assert records.get_log_offset("p", n) == 0
    records.set_log_offset("p", n, 4096)
    assert records.get_log_offset("p", n) == 4096
    records.add_metrics("p", n, [("loss", 1.0, 1, 1.0)], log_offset=5000)
    assert records.get_log_offset("p", n) == 5000
    with pytest.raises(TypeError):
        records.set_log_offset("p", n, -1)
    with pytest.raises(NotFound):
        records.add_metrics("p", 99, [("loss", 1.0, 1, 1.0)])


def test_events_round_trip_and_resume(records):
    n = records.allocate_job("p", {})
    records.add_event("p", n, "agent", "started pid 12", {"pid": 12})
    records.add_event("p", n, "output", "saved", None)
    first, second = records.events("p", n)
    assert (first["kind"], first["message"], first["data"]) == ("agent", "started pid 12", {"pid": 12})
    assert second["data"] is None and second["ts"] >= first["ts"]
    assert records.events("p", n, after=first["seq"]) == [second]
    with pytest.raises(TypeError):
        records.add_event("p", n, "", "no kind")


def test_system_samples_round_trip(records):
    n = records.allocate_job("p", {})
    samples = [{"ts": 1.0, "cpu_percent": 99.5, "rss_bytes": 10 << 20, "gpu_util": None, "gpu_mem_bytes": None},
               {"ts": 2.0, "cpu_percent": 12.0, "rss_bytes": 11 << 20, "gpu_util": 80.0, "gpu_mem_bytes": 3 << 30}]
    records.add_system_samples("p", n, samples)
    records.add_system_samples("p", n, [{"ts": 3.0, "cpu_percent": 1.0, "rss_bytes": 1}])
    assert records.system_samples("p", n) == samples + [
        {"ts": 3.0, "cpu_percent": 1.0, "rss_bytes": 1, "gpu_util": None, "gpu_mem_bytes": None}]


def test_concurrent_writers_and_readers_see_whole_batches(records):
    writers, batches, size = 6, 15, 40
    for _ in range(writers):
        records.allocate_job("p", {})
    start = threading.Barrier(writers + 2)
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def write(n: int) -> None:
        try:
            start.wait()
            for b in range(batches):
                records.add_metrics("p", n, [("loss", float(i), b * size + i, 1.0) for i in range(size)])
                records.add_event("p", n, "batch", str(b))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def read() -> None:
        try:
            start.wait()
            last = [0] * writers
            while not done.is_set():
                for n in range(1, writers + 1):
                    count = records.metric_summary("p", n).get("loss", {}).get("count", 0)
                    series = records.metric_series("p", n, "loss").get("loss", [])
                    assert count % size == 0 and len(series) % size == 0  # never half a batch
                    assert count >= last[n - 1]
                    last[n - 1] = count
                    seen.append(count)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(1, writers + 1)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads[:writers]:
        t.join()
    done.set()
    for t in threads[writers:]:
        t.join()
    assert errors == []
    assert seen  # the readers did run alongside
    for n in range(1, writers + 1):
        assert records.metric_summary("p", n)["loss"]["count"] == batches * size
        assert len(records.events("p", n)) == batches


def test_a_log_left_behind_is_marked_found_for_ended_jobs_only_and_cleared(records):
    running = records.allocate_job("p", {"command": "a"})
    ended = records.allocate_job("p", {"command": "b"})
    for number in (running, ended):
        records.set_state("p", number, "starting")
        records.set_state("p", number, "running")
        records.set_log_behind("p", number, True)
    records.set_state("p", ended, "success")
    assert records.logs_behind() == [("p", ended)]          # a running job is the watch's, not the catch-up's
    records.set_log_behind("p", ended, False)
    assert records.logs_behind() == []


def test_metric_points_count_every_metric_and_a_batch_for_another_attempt_records_nothing(records):
    from floydd.errors import NotFound
    number = records.allocate_job("p", {"command": "a", "attempt": 2})
    assert records.metric_points("p", number) == 0
    records.add_metrics("p", number, [("loss", 1.0, 1, 1.0), ("loss", 0.5, 2, 2.0), ("acc", 0.1, 1, 1.0)],
                        log_offset=10, attempt=2)
    assert records.metric_points("p", number) == 3
    with pytest.raises(NotFound, match="attempt 2, not 1"):
        records.add_metrics("p", number, [("loss", 9.0, 3, 3.0)], log_offset=99, attempt=1)
    assert records.metric_points("p", number) == 3 and records.get_log_offset("p", number) == 10
