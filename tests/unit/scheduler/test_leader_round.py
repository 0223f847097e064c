"""The leader's round on a big cluster: a waiting reason that names every node still fits in a
command, and a round with nothing new commits nothing."""

from __future__ import annotations

from floydd.jobs.leader import REASON_MAX, ClusterScheduler
from tests.unit.jobs.test_cluster_leader import FakeCluster


class Counting(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.commits: list[str] = []

    def apply(self, cmd: dict):
        self.commits.append(cmd["op"])
        return super().apply(cmd)


async def test_a_reason_naming_every_node_of_a_big_cluster_is_cut_to_fit_a_command():
    cluster = Counting()
    for i in range(200):
        cluster.node(f"n{i:03d}", f"a-box-with-a-long-name-{i:03d}", gpus=[0])
    jobs = [cluster.submit(1) for _ in range(202)]
    scheduler = ClusterScheduler(cluster, clock=lambda: cluster.now)
    cluster.commits.clear()
    await scheduler.lead_once()
    assert cluster.commits == ["job.place"] * 200 + ["job.update"] * 2
    first, second = (cluster.state.jobs[key]["waiting_for"] for key in jobs[200:])
    assert len(first) == REASON_MAX and first.startswith("waiting for 1 GPU: a-box-with-a-long-name-000 has 0 free")
    assert first.endswith("…")
    assert second == f"queued behind {jobs[200]}, which waits for GPUs"
    cluster.commits.clear()
    await scheduler.lead_once()
    assert cluster.commits == []
