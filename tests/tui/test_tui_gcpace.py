"""``floyd top`` paces Python's cycle collector: full passes on the poller thread every few
polls, never of the collector's own (they fell mid-draw: the worst renders of issue 23), and the
process's collector as it was once the app is gone."""

from __future__ import annotations

import gc

from floydd.tui.app import FloydTop
from floydd.tui.gcpace import GcPacing
from tests.tui.conftest import SIZE, started, until
from tests.tui.fake_cluster import FakeClient


def _full_passes() -> list[int]:
    passes: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            passes.append(1)
    gc.callbacks.append(seen)
    return passes


def test_full_passes_come_every_few_polls_and_the_collector_is_put_back() -> None:
    before = gc.get_threshold()
    pacing, passes = GcPacing(every=3), _full_passes()
    try:
        pacing.after_poll()
        assert not pacing.started and gc.get_threshold() == before and gc.get_freeze_count() == 0
        pacing.after_poll()                                   # the app is up: freeze, pace
        assert pacing.started and gc.get_freeze_count() > 0
        assert gc.get_threshold()[:2] == before[:2] and gc.get_threshold()[2] >= 1 << 30
        passes.clear()
        junk = []
        for _ in range(20):                                   # the collector's own full pass would come
            junk = [[junk] for _ in range(5000)]
        assert passes == []
        for _ in range(6):                                    # polls 3..8: a pass at 3 and 6
            pacing.after_poll()
        assert len(passes) == 2
    finally:
        pacing.stop()
        gc.callbacks.pop()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0 and not pacing.started


async def test_the_app_paces_the_collector_only_while_it_runs() -> None:
    before = gc.get_threshold()
    app = FloydTop(FakeClient(), refresh=0.05, pace_gc=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app)
        await until(pilot, lambda: app.gc_pacing.started, what="the second poll")
        assert gc.get_threshold()[2] >= 1 << 30
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    assert FloydTop(FakeClient()).gc_pacing is None           # tests and embedders: the collector untouched
