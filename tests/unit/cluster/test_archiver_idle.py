"""The archiver's loop at rest (issue 23): a node that does not lead waits for a change of
leadership, it does not spin or poll; a leader with few hot jobs waits for its round."""

from __future__ import annotations

import asyncio

from floydd.cluster.archiver import _LOOK, Archiver
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG
from floydd.cluster.state.machine import ClusterState
from tests.conftest import wait_until_async


class _Driver:
    def __init__(self, leads: bool) -> None:
        self.leads, self.asked, self.proposed = leads, 0, []
        self.changed = asyncio.Event()

    async def leader_change(self, timeout):
        await asyncio.wait_for(self.changed.wait(), timeout)
        self.changed = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        self.asked += 1
        return self.leads

    async def propose(self, cmd, *, timeout=None, fenced=False):
        self.proposed.append(cmd)
        return {"archived": []}


async def test_a_follower_waits_for_leadership_and_acts_once_it_leads():
    driver = _Driver(leads=False)
    archiver = Archiver(node_id="n1", config=DEFAULT_CLUSTER_CONFIG, state=ClusterState(), driver=driver)
    task = asyncio.create_task(archiver.run())
    try:
        await asyncio.sleep(0.7)        # a window to count the loop's looks in, not a wait
        assert driver.asked == 1        # it was ~100,000 a second once (sleep(0)), then two a second
        driver.leads = True
        driver.changed.set()
        await wait_until_async(lambda: driver.asked >= 2, 5.0)
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_pause_of_a_leader_with_few_hot_jobs_is_its_round():
    state = ClusterState()
    leader = Archiver(node_id="n1", config=DEFAULT_CLUSTER_CONFIG, state=state, driver=_Driver(leads=True))
    assert leader._pause(9.0, 500) == 9.0
    assert leader._pause(0.1, 500) == _LOOK
