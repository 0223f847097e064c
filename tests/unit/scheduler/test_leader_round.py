"""The leader's round on a big cluster: it commits placements only (why the rest waits stays in
its memory), the reasons are short at any size, and a round with nothing new commits nothing."""

from __future__ import annotations

from floydd.scheduler.placer import ClusterScheduler
from tests.unit.jobs.test_cluster_leader import FakeCluster


class Counting(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.commits: list[str] = []
        self.config.suspect_after = 3.0             # a leader just elected judges no box yet

    def silence(self) -> dict[str, float]:
        return dict.fromkeys(self.state.nodes, 0.0)

    def apply(self, cmd: dict):
        self.commits.append(cmd["op"])
        return super().apply(cmd)


async def test_a_round_commits_placements_only_and_keeps_short_reasons_in_memory():
    cluster = Counting()
    for i in range(1000):
        cluster.node(f"n{i:04d}", f"a-box-with-a-long-name-{i:04d}", gpus=[0])
    cluster.node("down", "a-box-that-went-quiet", gpus=[0, 1])
    cluster.now += 100                                      # ... and every other box beat just now
    for i in range(1000):
        cluster.apply({"op": "node.health", "id": f"n{i:04d}", "status": "up"})
    jobs = [cluster.submit(1) for _ in range(1002)]
    scheduler = ClusterScheduler(cluster, clock=lambda: cluster.now)
    cluster.commits.clear()
    await scheduler.lead_once()
    assert cluster.commits == ["job.place"] * 1000
    first, second = jobs[1000:]
    assert scheduler.reasons([first, second, jobs[0]]) == {
        first: "waiting for 1 GPU: no node has room (1000 short of GPUs, 1 unhealthy)",
        second: f"queued behind {first}, which waits for GPUs"}
    assert all(cluster.state.jobs[key].waiting_for == "" for key in (first, second))   # nothing committed
    cluster.commits.clear()
    await scheduler.lead_once()
    assert cluster.commits == []


async def test_a_leader_forgets_its_reasons_once_nothing_waits_or_it_no_longer_leads():
    cluster = Counting()
    cluster.node("n1", "box", gpus=[0])
    first, second = cluster.submit(1), cluster.submit(1)
    scheduler = ClusterScheduler(cluster, clock=lambda: cluster.now)
    await scheduler.lead_once()
    assert scheduler.reasons([second]) == {second: "waiting for 1 GPU: box has 0 GPUs free (held by p/1)"}
    cluster.apply({"op": "job.update", "job": second, "state": "stopped"})
    await scheduler.lead_once()
    assert scheduler.waiting == {}
    third = cluster.submit(1)
    await scheduler.lead_once()
    assert third in scheduler.waiting
    cluster.is_leader = False
    await scheduler._lead_if_leader()
    assert scheduler.waiting == {} and scheduler.leading_since is None
    assert first


async def test_the_leader_places_a_job_where_its_data_is_among_nodes_that_fit_as_well():
    cluster = Counting()
    for nid in ("n1", "n2", "n3"):
        cluster.node(nid, f"box-{nid}", gpus=[0, 1])
    cluster.apply({"op": "dataset.add_version", "name": "mnist", "tree": "ab" * 32, "size": 10, "node": "n3"})
    cluster.apply({"op": "dataset.holders", "name": "mnist", "version": 1, "node": "n2", "holds": True})
    cluster.apply({"op": "dataset.add_version", "name": "big", "tree": "cd" * 32, "size": 10**9, "node": "n1"})
    cluster.apply({"op": "dataset.holders", "name": "big", "version": 1, "node": "n2", "holds": True})
    mnist, big = ({"ref": "mnist:1", "tree": "ab" * 32, "mount": "/input"},
                  {"ref": "big:1", "tree": "cd" * 32, "mount": "/big"})
    keys = []
    for gpus, data in ((2, [mnist, big]), (1, [mnist]), (1, [big])):
        spec = {"command": "python train.py", "resources": {"gpus": gpus}, "code_tree": "ab" * 32, "data": data}
        keys.append(cluster.apply({"op": "job.submit", "idem_key": f"k{len(keys)}", "project": "p",
                                   "spec": spec})["id"])
    await ClusterScheduler(cluster, clock=lambda: cluster.now).lead_once()
    assert [cluster.state.jobs[key].node for key in keys] == [
        "n2",       # every box fits it as well: n2 holds the most of its data
        "n3",       # n1 and n3 fit as well: n3 holds mnist
        "n3"]       # n1 holds big, but n3 (1 GPU free) fits better: data never beats best fit
