"""The limits a job's watch meets (:mod:`floydd.runtime.limits`): thinning metric points past
their cap, and saying once, in the job's events, that a limit was reached."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from floydd.agent.status import Status
from floydd.runtime.limits import LIMIT_KIND, JobLimits, thin
from floydd.runtime.tail import MetricPoint, Scan


def _points(names: str) -> list[MetricPoint]:
    return [MetricPoint(name, float(i), i, float(i)) for i, name in enumerate(names)]


def test_thin_keeps_the_room_then_the_last_point_of_each_metric_in_order():
    points = _points("ababcab")
    assert [(p.name, p.step) for p in thin(points, 2)] == [("a", 0), ("b", 1), ("c", 4), ("a", 5), ("b", 6)]
    assert thin(points, 100) == points and [p.step for p in thin(points, -5)] == [4, 5, 6]


@given(st.text(alphabet="abc", max_size=40), st.integers(min_value=0, max_value=50))
def test_thinned_points_are_an_ordered_subset_with_every_last_value(names, room):
    points = _points(names)
    kept = thin(points, room)
    assert kept == sorted(kept, key=lambda p: p.step) and set(kept) <= set(points)
    assert kept[:room] == points[:room]
    assert {p.name: p for p in kept} == {p.name: p for p in points}          # the last of each metric is kept
    assert len(kept) <= max(room, 0) + len(set(names))


class Events:
    def __init__(self) -> None:
        self.items: list[dict] = []

    def add(self, kind: str, message: str, data: dict | None) -> None:
        self.items.append({"kind": kind, "message": message, "data": data})


def test_the_limits_are_said_once_each_also_by_a_second_watch_of_the_same_job():
    events = Events()
    for _ in range(2):                                     # a daemon restarted during the job: a new watch
        limits = JobLimits(max_log_bytes=256 << 20, max_points=3, event=events.add, events=lambda: events.items)
        scan = limits.thin(Scan(_points("aaaabb")), recorded=1)
        assert [p.step for p in scan.points] == [0, 1, 3, 5] and scan.skipped == 2
        assert "max_metric_points" in scan.first_skip
        capped = Status(agent_pid=1, agent_start_time=1.0, state="running", log_capped=2.0)
        assert limits.needs_look(capped)
        limits.seen(capped)
        assert not limits.needs_look(capped)
        done = Status(agent_pid=1, agent_start_time=1.0, state="exited", log_capped=2.0, log_dropped_lines=57_001_233,
                      log_dropped_bytes=int(3.6 * 2**30))
        limits.seen(done)
    messages = [e["message"] for e in events.items]
    assert all(e["kind"] == LIMIT_KIND for e in events.items) and len(messages) == 3, messages
    assert messages[0].startswith("the job's metric points reached the cap of 3 (max_metric_points)")
    assert messages[1].startswith("job.log reached its 256 MiB cap (max_log_mb)")
    assert messages[2] == "57,001,233 lines (3.6 GiB) dropped: the job's log reached its 256 MiB cap (max_log_mb)"


def test_under_the_cap_nothing_is_thinned_or_said():
    events = Events()
    limits = JobLimits(max_log_bytes=None, max_points=0, event=events.add, events=lambda: events.items)
    scan = Scan(_points("ab" * 50))
    assert limits.thin(scan, recorded=10**9) is scan and not limits.needs_look(None)
    assert events.items == []
