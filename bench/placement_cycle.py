"""The leader's whole placement cycle (``ClusterScheduler.lead_once``) on a big replicated
state, its growth with the cluster's size, and the old cycle in the same run.

    python bench/placement_cycle.py [--smoke] [--sizes 500,1000,2000,4000] [--old-at 500]

For each size N: N nodes x 8 GPUs and 10 N queued jobs (seeded: 80 % want 1 GPU, 10 % 2 GPUs,
10 % none; more GPUs asked than there are, so the tail waits), built with the real
``ClusterState`` fed real commands through ``apply``. The leader runs against a stand-in
cluster whose ``place``/``update_job`` commit at once through the same ``apply`` (no raft,
no network), and judges silent nodes as a leader of long standing does. Timed, in CPU
seconds of this process (the box is shared):

  first    the first cycle: places what fits (``job.place`` applied one by one) and
           works out the reason of every job that waits (kept in the leader's memory
           since issue 12: the "reasons" column counts reasons committed, now 0);
  steady   a cycle with nothing new (best of 5): what every box's leader loop pays each
           second; in brackets three of its parts, each timed alone: one pass over the jobs
           (the floor: the queue must be read), the node snapshots, ``place()``; "x pass" is
           the steady cycle over that floor;
  churn    a cycle after 1 % of the placed jobs ended: a few placements, a new reason;
  apply    CPU per applied ``job.place`` (during the first cycle).

Baselines, same run: the cost of one pass over the jobs at each size (the floor of any
cycle), and the old cycle (before issue 10: held GPUs recomputed from every active job
per node and per applied placement, every job sorting every node) at the ``--old-at``
sizes (default the smallest: it grows as N^2.2; at 1,000 nodes it runs for 1.5 minutes). The
growth exponent is the least-squares slope of log(time) over log(N). Exits 1 if the old
and new cycles place differently, or (full run only) if a steady cycle at 1,000 nodes
takes 100 ms or more.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import floydd.scheduler.placer as leader  # noqa: E402
from floydd.cluster.state.machine import ClusterState  # noqa: E402
from floydd.scheduler import PendingJob, place  # noqa: E402
from tests.unit.scheduler import _reference as reference  # noqa: E402

GPUS, JOBS_PER_NODE, NOW, TARGET_MS = 8, 10, 1_000_000.0, 100.0


class StandIn:
    """The cluster as the leader sees it: every command committed at once, term 1, through
    ``ClusterState.apply`` (the state machine's whole apply path, minus raft)."""

    node_id, is_leader = "node-00000", True

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.config = SimpleNamespace(stale_after=20.0, suspect_after=3.0)
        self.index = 0
        self.place_s, self.placed, self.updates = 0.0, 0, 0

    def silence(self) -> dict[str, float]:
        """Every node was heard from just now (the leader judges no box here)."""
        return dict.fromkeys(self.state.nodes, 0.0)

    def apply(self, cmd: dict):
        self.index += 1
        return self.state.apply({"ts": NOW, **cmd}, index=self.index, term=1)

    async def place(self, job, node, gpus, *, parts=None, timeout=None):
        cmd = {"op": "job.place", "job": job, "node": node, "gpus": list(gpus), "term": 1}
        start = time.process_time()
        try:
            return self.apply({**cmd, "parts": parts} if parts else cmd)
        finally:
            self.place_s += time.process_time() - start
            self.placed += 1

    async def update_job(self, job, *, timeout=None, **fields):
        self.updates += 1
        return self.apply({"op": "job.update", "job": job, **fields})


class OldState(ClusterState):
    """The state as it was: ``held_gpus`` (and so every applied placement) looks at every active job."""

    def held_gpus(self, node: str) -> dict[int, str]:
        return reference.held_gpus(self, node)


class OldScheduler(leader.ClusterScheduler):
    def snapshots(self, now: float):
        return reference.snapshots(self.cluster.state, now, self.cluster.config.stale_after)


@contextmanager
def old_place():
    """The leader module's ``place`` swapped for the old one (the bench's baseline only)."""
    leader.place = reference.place
    try:
        yield
    finally:
        leader.place = place


def build(nodes: int, old: bool = False) -> StandIn:
    cluster = StandIn(OldState() if old else ClusterState())
    for i in range(nodes):
        cluster.apply({"op": "node.upsert", "id": f"node-{i:05d}", "name": f"box-{i:05d}", "address": "10.0.0.1",
                       "cluster_port": 7654, "resources": {"gpus": list(range(GPUS))}})
    rng = random.Random(nodes)
    for i in range(nodes * JOBS_PER_NODE):
        gpus = rng.choices((1, 2, 0), (8, 1, 1))[0]
        cluster.apply({"op": "job.submit", "idem_key": f"k{i}", "project": "p",
                       "spec": {"command": "python train.py", "resources": {"gpus": gpus}}})
    return cluster


def cpu(loop, coro_or_fn) -> float:
    start = time.process_time()
    if asyncio.iscoroutine(coro_or_fn):
        loop.run_until_complete(coro_or_fn)
    else:
        coro_or_fn()
    return time.process_time() - start


def cycles(nodes: int, old: bool = False) -> dict:
    """Build a state of ``nodes`` nodes and time its cycles (CPU seconds)."""
    loop = asyncio.new_event_loop()
    t0 = time.process_time()
    cluster = build(nodes, old)
    out = {"build": time.process_time() - t0, "jobs": len(cluster.state.jobs)}
    scheduler = (OldScheduler if old else leader.ClusterScheduler)(cluster, clock=lambda: NOW)
    scheduler.leading_since = NOW - 3600.0                  # a leader of long standing judges silent nodes
    with old_place() if old else _nothing():
        out["first"] = cpu(loop, scheduler.lead_once())
        out["placed"], out["reasons"], out["apply"] = cluster.placed, cluster.updates, cluster.place_s / cluster.placed
        out["steady_all"] = [cpu(loop, scheduler.lead_once()) for _ in range(5)]
        if cluster.placed != out["placed"] or cluster.updates != out["reasons"]:
            raise SystemExit("a steady cycle changed something: the bench is wrong")
        out["steady"] = min(out["steady_all"])
        out["pass"] = min(cpu(loop, lambda: [j for j in cluster.state.jobs.values() if j.state == "queued"])
                          for _ in range(3))
        out["snapshots"] = min(cpu(loop, lambda: scheduler.snapshots(NOW)) for _ in range(3))
        queued = [j for j in cluster.state.jobs.values() if j.state == "queued"]
        pending = [PendingJob(key=j.id, gpu_count=j.asked_gpu_count) for j in queued]
        snaps = list(scheduler.snapshots(NOW).values())
        out["place"] = min(cpu(loop, lambda: leader.place(snaps, pending)) for _ in range(3))
        placed = [k for k, j in cluster.state.jobs.items() if j.state == "starting"]
        for key in placed[:max(1, len(placed) // 100)]:
            cluster.apply({"op": "job.update", "job": key, "state": "running"})
            cluster.apply({"op": "job.update", "job": key, "state": "success"})
        before = cluster.placed
        out["churn"] = cpu(loop, scheduler.lead_once())
        out["churn_placed"] = cluster.placed - before
    out["where"] = {k: (j.node, j.gpu_ids) for k, j in cluster.state.jobs.items()}
    loop.close()
    return out


@contextmanager
def _nothing():
    yield


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(y) over log(x)."""
    xs, ys = [math.log(x) for x, _ in points], [math.log(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="20 and 40 nodes, no target check")
    parser.add_argument("--sizes", default=None, help="node counts, comma-separated (default 500,1000,2000,4000)")
    parser.add_argument("--old-at", default=None, help="node counts to run the old cycle at (default: the smallest)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("20,40" if args.smoke else "500,1000,2000,4000")).split(",")]
    old_at = [int(s) for s in args.old_at.split(",")] if args.old_at else sizes[:1]
    failed = False
    print(f"placement_cycle: N nodes x {GPUS} GPUs, {JOBS_PER_NODE} N queued jobs; CPU ms "
          f"(steady: best of 5, its parts best of 3)")
    print(f"{'':>4} {'nodes':>6} {'jobs':>7} {'build':>7} {'first':>8} {'placed':>7} {'reasons':>7} "
          f"{'apply/pl':>9} {'steady':>8} {'(pass':>7} {'snaps':>8} {'place)':>8} {'churn':>7} {'x pass':>7}")
    new_rows, old_rows = [], []
    for nodes in sorted(set(sizes) | set(old_at)):
        for old in ((False, True) if nodes in old_at else (False,)):
            r = cycles(nodes, old)
            (old_rows if old else new_rows).append((nodes, r))
            print(f"{'old' if old else 'new':>4} {nodes:>6,} {r['jobs']:>7,} {r['build'] * 1e3:>7.0f} "
                  f"{r['first'] * 1e3:>8.1f} {r['placed']:>7,} {r['reasons']:>7,} {r['apply'] * 1e6:>7.1f}us "
                  f"{r['steady'] * 1e3:>8.1f} {r['pass'] * 1e3:>7.1f} {r['snapshots'] * 1e3:>8.1f} "
                  f"{r['place'] * 1e3:>8.1f} {r['churn'] * 1e3:>7.1f} {r['steady'] / r['pass']:>6.1f}x")
            if not old and nodes == 1_000 and not args.smoke and r["steady"] * 1e3 >= TARGET_MS:
                print(f"FAIL: a steady cycle at 1,000 nodes takes {r['steady'] * 1e3:.0f} ms "
                      f"(target < {TARGET_MS:.0f})")
                failed = True
    new = dict(new_rows)
    for nodes, r in old_rows:
        same = r["where"] == new[nodes]["where"]
        failed |= not same
        print(f"at {nodes:,} nodes the old cycle: first {r['first'] / new[nodes]['first']:.0f}x, steady "
              f"{r['steady'] / new[nodes]['steady']:.0f}x, apply {r['apply'] / new[nodes]['apply']:.0f}x the new one's;"
              f" same placements: {'yes' if same else 'NO'}")
    if len(new_rows) > 1:
        fit = {what: slope([(n, r[what]) for n, r in new_rows]) for what in ("first", "steady", "pass", "churn")}
        print("growth exponent (time ~ N^k) over " + ", ".join(f"{n:,}" for n, _ in new_rows) + " nodes: "
              + ", ".join(f"{what} {k:.2f}" for what, k in fit.items()) + "  (linear: 1.0; old cycle: ~2.2)")
        print("  steady, size by size: " + ", ".join(
            f"{a:,}->{b:,} {slope([(a, ra['steady']), (b, rb['steady'])]):.2f}"
            for (a, ra), (b, rb) in zip(new_rows, new_rows[1:])))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
