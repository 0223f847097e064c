"""The archiver's loop at rest (issue 23): a node that does not lead looks now and then, it
does not spin; a leader with few hot jobs waits for its round."""

from __future__ import annotations

import asyncio

from floydd.cluster.archiver import _LOOK, Archiver
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG
from floydd.cluster.state.machine import ClusterState


class _Driver:
    def __init__(self, leads: bool) -> None:
        self.leads, self.asked, self.proposed = leads, 0, []

    @property
    def is_leader(self) -> bool:
        self.asked += 1
        return self.leads

    async def propose(self, cmd, *, timeout=None, fenced=False):
        self.proposed.append(cmd)
        return {"archived": []}


async def _run_for(driver: _Driver, seconds: float) -> None:
    archiver = Archiver(node_id="n1", config=DEFAULT_CLUSTER_CONFIG, state=ClusterState(), driver=driver)
    task = asyncio.create_task(archiver.run())
    try:
        await asyncio.sleep(seconds)        # a window to count the loop's looks in, not a wait
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_follower_looks_every_half_second_and_does_not_spin():
    driver = _Driver(leads=False)
    await _run_for(driver, 0.3)
    assert driver.asked <= 4                # it was ~100,000 a second (sleep(0) between looks)


def test_the_pause_of_a_leader_with_few_hot_jobs_is_its_round_and_of_a_follower_a_look():
    state = ClusterState()
    leader = Archiver(node_id="n1", config=DEFAULT_CLUSTER_CONFIG, state=state, driver=_Driver(leads=True))
    follower = Archiver(node_id="n1", config=DEFAULT_CLUSTER_CONFIG, state=state, driver=_Driver(leads=False))
    assert leader._pause(9.0, 500) == 9.0
    assert leader._pause(0.1, 500) == _LOOK
    assert follower._pause(9.0, 500) == _LOOK
