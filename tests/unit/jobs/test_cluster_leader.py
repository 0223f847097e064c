"""The leader's half of the job pipeline (ClusterScheduler) and the node's reconciler against a
real ClusterState (no raft): placement over every node, reasons for waiting jobs, giving up
on silent nodes, a box's reports."""

from __future__ import annotations

from types import SimpleNamespace

from floydd.cluster.state.machine import ClusterState
from floydd.scheduler.placer import ClusterScheduler
from floydd.jobs.local import LocalJobs
from floydd.jobs.reconcile import Reconciler
from floydd.model import Job


class FakeCluster:
    """Commits every command at once, in term 1, on one ClusterState."""

    node_id, name, is_leader = "n1", "box-a", True

    def __init__(self) -> None:
        self.state = ClusterState()
        self.config = SimpleNamespace(stale_after=20.0, heartbeat_interval=5.0, suspect_after=3.0)
        self.now = 1000.0
        self._index = 0

    def on_apply(self, callback) -> None:
        pass

    def apply(self, cmd: dict):
        self._index += 1
        return self.state.apply({"ts": self.now, **cmd}, index=self._index, term=1)

    async def place(self, job, node, gpus, *, parts=None, timeout=None):
        cmd = {"op": "job.place", "job": job, "node": node, "gpus": list(gpus), "term": 1}
        return self.apply({**cmd, "parts": parts} if parts else cmd)

    async def update_job(self, job, *, timeout=None, **fields):
        return self.apply({"op": "job.update", "job": job, **fields})

    async def leader_update_job(self, job, *, timeout=None, **fields):
        return self.apply({"op": "job.update", "job": job, "term": 1, **fields})

    def silence(self) -> dict:
        """Seconds since each node was heard from: here, since its last heartbeat."""
        return {nid: self.now - n["last_heartbeat"] for nid, n in self.state.nodes.items()}

    def heard_ages(self) -> dict:
        """Seconds since each node's own entry was applied: here, since its last heartbeat."""
        return self.silence()

    def beat_soon(self) -> None:
        pass

    async def suspect(self, node, *, timeout=None):
        return self.apply({"op": "node.health", "id": node, "status": "suspect"})

    def node(self, nid: str, name: str, gpus=()) -> None:
        self.apply({"op": "node.upsert", "id": nid, "name": name, "address": "127.0.0.1", "cluster_port": 1,
                    "resources": {"gpus": list(gpus)}})

    def submit(self, gpus: int, nodes: int = 1) -> str:
        spec = {"command": "python train.py", "resources": {"gpus": gpus, "nodes": nodes}, "code_tree": "ab" * 32}
        return self.apply({"op": "job.submit", "idem_key": f"k{self._index}", "project": "p", "spec": spec})["id"]


def _service(cluster: FakeCluster, lost_after: float = 60.0) -> SimpleNamespace:
    return SimpleNamespace(scheduler=ClusterScheduler(cluster, lost_after=lost_after, clock=lambda: cluster.now))


def _reconciler(cluster: FakeCluster, records, tmp_path) -> Reconciler:
    async def nothing():
        return {}
    runtime = SimpleNamespace(running=dict, sweep=nothing, scan_runs=nothing)
    return Reconciler(cluster=cluster, local=LocalJobs(records=records, store=None, runtime=runtime, jobs_dir=tmp_path),
                      runtime=runtime, store=None, fetch_tree=None, node_name="box-a")


async def test_the_leader_places_over_every_node_and_says_why_the_rest_waits():
    cluster = FakeCluster()
    cluster.node("n1", "box-a")
    cluster.node("n2", "box-b", gpus=[0, 1])
    big, cpu, small = cluster.submit(2), cluster.submit(0), cluster.submit(1)
    scheduler = _service(cluster).scheduler
    await scheduler.lead_once()
    jobs = cluster.state.jobs
    assert (jobs[big].state, jobs[big].node, jobs[big].gpu_ids) == ("starting", "n2", (0, 1))
    assert (jobs[cpu].state, jobs[cpu].node) == ("starting", "n1")     # the less loaded node
    assert jobs[small].state == "queued"
    assert "box-b has 0 GPUs free (held by p/1)" in scheduler.waiting[small]   # in the leader's memory
    assert jobs[big].placed_term == 1                                      # fenced by the leader's term


async def test_a_silent_node_is_suspect_its_running_jobs_unknown_then_lost_and_its_starting_ones_placed_again():
    cluster = FakeCluster()
    cluster.node("n1", "box-a", gpus=[0])
    cluster.node("n2", "box-b", gpus=[0])
    running, starting = cluster.submit(1), cluster.submit(1)
    service = _service(cluster, lost_after=60.0)
    never = cluster.apply({"op": "job.submit", "idem_key": "never", "project": "p", "spec": {
        "command": "x", "resources": {"gpus": 0}, "code_tree": "ab" * 32, "restart": {"policy": "never"}}})["id"]
    await cluster.place(running, "n2", [0])
    await cluster.update_job(running, state="running", attempt=1, node="n2")
    await cluster.place(never, "n2", [])
    await cluster.update_job(never, state="running", attempt=1, node="n2")
    await cluster.place(starting, "n1", [0])

    cluster.now += 10                                   # nobody beats; a leader elected just now waits
    cluster.apply({"op": "node.health", "id": "n1", "status": "up"})
    service.scheduler.leading_since = cluster.now - 1
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    assert cluster.state.nodes["n2"]["status"] == "up" and cluster.state.jobs[running].state == "running"

    service.scheduler.leading_since = cluster.now - 100          # it has led long enough to judge
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    assert cluster.state.nodes["n2"]["status"] == "suspect"
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    job = cluster.state.jobs[running]
    assert (job.state, job.unknown_since) == ("unknown", cluster.now)
    assert "box-b is out of touch" in job.reason
    assert cluster.state.held_gpus("n2") == {0: running}            # an unknown run keeps its GPU
    assert cluster.state.jobs[starting].state == "starting"      # n1 beat recently

    cluster.now += 49                                    # box-b quiet for 59 s: within the window
    cluster.apply({"op": "node.health", "id": "n1", "status": "up"})
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    assert cluster.state.jobs[running].state == "unknown"
    cluster.now += 2                                     # past it: lost, and the default policy reruns it
    cluster.apply({"op": "node.health", "id": "n1", "status": "up"})
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    job = cluster.state.jobs[running]
    assert (job.state, job.reruns, job.node) == ("queued", 1, None)
    assert "box-b was out of touch for 61s" in job.reason
    assert cluster.state.jobs[never].state == "lost"            # --restart never: it stays lost

    cluster.now += 10
    cluster.apply({"op": "node.health", "id": "n2", "status": "up"})
    await service.scheduler.lead_once()                  # n1 silent now: its starting job is queued again
    job = cluster.state.jobs[starting]
    assert (job.state, job.node) == ("queued", None)
    assert "box-a went silent before the job started" in job.history[-1][1]
    rerun = cluster.state.jobs[running]                  # the rerun (first in the queue) has n2's GPU
    assert (rerun.state, rerun.node, rerun.attempts) == ("starting", "n2", 2)


async def test_a_gang_is_placed_on_distinct_nodes_in_one_placement():
    cluster = FakeCluster()
    cluster.node("n1", "box-a", gpus=[0, 1])
    cluster.node("n2", "box-b", gpus=[0])
    cluster.node("n3", "box-c")
    gang, later = cluster.submit(1, nodes=2), cluster.submit(0, nodes=3)
    await _service(cluster).scheduler.lead_once()
    job = cluster.state.jobs[gang]
    assert [(p.rank, p.node, p.gpu_ids) for p in job.parts] == [(0, "n2", (0,)), (1, "n1", (0,))]
    cpu = cluster.state.jobs[later]                          # a CPU gang over all three boxes
    assert (cpu.state, [p.node for p in cpu.parts]) == ("starting", ["n3", "n1", "n2"])


async def test_a_gang_with_a_silent_node_is_placed_again_before_it_runs_and_unknown_then_lost_after():
    cluster = FakeCluster()
    for nid, name in (("n1", "box-a"), ("n2", "box-b"), ("n3", "box-c")):
        cluster.node(nid, name)
    first, second = cluster.submit(0, nodes=2), cluster.submit(0, nodes=2)
    await cluster.place(first, "n1", [], parts=[{"node": "n1", "gpus": []}, {"node": "n2", "gpus": []}])
    await cluster.place(second, "n3", [], parts=[{"node": "n3", "gpus": []}, {"node": "n2", "gpus": []}])
    await cluster.update_job(second, rank=0, node="n3", attempt=1, state="running")
    service = _service(cluster)
    service.scheduler.leading_since = cluster.now - 1000
    cluster.now += 10
    for nid in ("n1", "n3"):                                 # n2 (in both gangs) is silent
        cluster.apply({"op": "node.health", "id": nid, "status": "up"})
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    assert cluster.state.jobs[first].state == "queued"             # no part had started
    job = cluster.state.jobs[second]
    assert job.state == "unknown"                                  # rank 0 was running
    assert [p.state for p in job.parts] == ["running", "unknown"]
    # rank 0 fails when its peer vanishes: the job waits for the silent box's part
    await cluster.update_job(second, rank=0, node="n3", attempt=1, state="failed", reason="peer gone")
    assert cluster.state.jobs[second].state == "unknown"
    cluster.now += 51                                        # box-b quiet for 61 s
    cluster.apply({"op": "node.health", "id": "n3", "status": "up"})
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    job = cluster.state.jobs[second]                                  # lost, naming the silent box
    assert (job.state, job.reruns, job.parts) == ("queued", 1, ())
    assert "box box-b was out of touch" in job.reason and "box-c" not in job.reason


async def test_a_box_stopped_cleanly_keeps_its_jobs_within_their_window_and_loses_them_past_it():
    """Stopped for maintenance and never back (issue 21): its jobs are not ``running`` for
    ever; the window runs from the box's ``off`` as the leader heard it. Within it they are
    left as they are (a restart or an upgrade re-adopts them)."""
    cluster = FakeCluster()
    cluster.node("n1", "box-a")
    cluster.node("n2", "box-b", gpus=[0])
    key = cluster.submit(1)
    await cluster.place(key, "n2", [0])
    await cluster.update_job(key, state="running", attempt=1, node="n2")
    cluster.apply({"op": "node.health", "id": "n2", "status": "off"})
    service = _service(cluster, lost_after=60.0)
    service.scheduler.leading_since = cluster.now - 1000
    cluster.now += 2                                        # within suspect_after: left alone
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    assert cluster.state.jobs[key].state == "running"
    cluster.now += 57                                       # off for 59 s: kept (a restart re-adopts it)
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    assert (cluster.state.jobs[key].state, cluster.state.held_gpus("n2")) == ("running", {0: key})
    cluster.now += 2                                        # off for 61 s: lost, rerun by its policy
    await service.scheduler.give_up_on_silent_nodes(cluster.now)
    job = cluster.state.jobs[key]
    assert (job.state, job.reruns) == ("queued", 1)
    assert "box box-b was stopped (off) and not back for 61s (the job's lost-after window is 60s)" in job.reason
    assert cluster.state.nodes["n2"]["status"] == "off"     # never made suspect: it said it stopped


async def test_a_job_that_ran_and_ended_between_two_looks_is_reported_running_then_final(tmp_path):
    """The box's half: its records say success while the cluster still says starting (the job
    was quicker than one reconcile round); starting -> success is no valid edge, so the box
    reports running first, and the cluster ends up with success, not stuck in starting."""
    from floydd.records import Records
    cluster = FakeCluster()
    cluster.node("n1", "box-a", gpus=[0])
    key = cluster.submit(1)
    await cluster.place(key, "n1", [0])
    records = Records(tmp_path / "records.db")
    try:
        records.insert_job("p", 1, {"command": "python train.py", "attempt": 1})
        for state in ("starting", "running", "success"):
            records.set_state("p", 1, state, "exit code 0" if state == "success" else "")
        await _reconciler(cluster, records, tmp_path).round()
        job = cluster.state.jobs[key]
        assert (job.state, job.reason) == ("success", "exit code 0")
        assert job.started is not None and job.ended is not None
    finally:
        records.close()


async def test_a_box_settles_its_part_of_a_gang_that_ended_before_the_part_started(tmp_path):
    """Every part of a gang ends up final: a box whose part never started (the other part
    failed first) reports it stopped, so the job's parts do not say "starting" forever."""
    from floydd.records import Records
    cluster = FakeCluster()                         # this box is n1
    cluster.node("n1", "box-a")
    cluster.node("n2", "box-b")
    key = cluster.submit(0, nodes=2)
    await cluster.place(key, "n2", [], parts=[{"node": "n2", "gpus": []}, {"node": "n1", "gpus": []}])
    await cluster.update_job(key, rank=0, node="n2", attempt=1, state="failed", reason="exit code 1")
    assert cluster.state.jobs[key].state == "failed"
    records = Records(tmp_path / "records.db")
    try:
        await _reconciler(cluster, records, tmp_path).round()
        part = cluster.state.jobs[key].parts[1]
        assert (part.state, part.reason) == ("stopped", "the job ended before this part started")
        assert cluster.state.jobs[key].reason == "rank 0 on box-b failed: exit code 1"
    finally:
        records.close()


def test_judging_an_off_box_keeps_every_job_until_its_window_then_requeues_or_loses_it():
    from floydd.scheduler import outages
    nodes = {"n2": {"id": "n2", "name": "box-b", "status": "off"}, "n3": {"id": "n3", "name": "box-c",
                                                                          "status": "suspect"}}
    spec = {"command": "x", "code_tree": "ab" * 32, "restart": {"policy": "on-lost", "lost_after": 20}}
    jobs = [Job.from_dict({"id": f"p/{n}", "project": "p", "number": n, "created": 1.0, "updated": 1.0,
                           "state": state, "attempts": 1, "node": node, "spec": spec})
            for n, state, node in ((1, "running", "n2"), (2, "starting", "n2"), (3, "running", "n3"))]
    assert outages.troubled(nodes, ["n2", "n3"], {"n2": 2.0, "n3": 2.0}, 3.0) == {}       # not quiet long enough
    early = dict(outages.judge(jobs, nodes, {"n2": 19.0, "n3": 19.0}, 300.0))
    assert set(early) == {"p/3"} and early["p/3"]["state"] == "unknown"   # the suspect box's job only
    late = dict(outages.judge(jobs, nodes, {"n2": 21.0}, 300.0))
    assert (late["p/1"]["state"], late["p/2"]["state"]) == ("lost", "queued")
    assert late["p/1"]["reason"] == "box box-b was stopped (off) and not back for 21s (the job's lost-after " \
                                    "window is 20s)"
    assert outages.judge(jobs[:1], {}, {"n2": float("inf")}, 300.0)[0][1]["state"] == "unknown"   # removed box
