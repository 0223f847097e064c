"""Raft entries per job, and the time to drain a queue, with 0, 60 and 500 queued GPU jobs;
against the old leader (every queued job's reason committed when it changes) in the same run.

    python bench/queue_entries.py [--smoke] [--queued 0,60,500] [--seconds 0.3] [--old-up-to 150]

Three boxes in one event loop (tests/harness/pipeline.py: real raft over mTLS on
loopback, real records, stores and job services; a fake runtime), 2 GPUs each, heartbeats
every 5 s as the daemon's default. For each queue size Q, 6 + Q one-GPU jobs are submitted
at once from a follower; each runs for ``--seconds`` after it starts, then succeeds. Counted
on one box, from the first submission until the last job ended everywhere: every entry
applied, and the jobs' own (``job.*``), per job, with the ops that made them; and the drain
time against the ideal (waves of 6 jobs x ``--seconds``). The baseline is the same run with
the leader as it was before issue 12: after each round it commits, for every queued job
whose reason changed, a ``job.update`` with ``waiting_for`` (so each move of the head of
the queue rewrites the reason of every job behind it). It runs up to ``--old-up-to`` queued
jobs (at 500 it alone takes minutes).

Then the issue's other finding, "CPU jobs never queue: 30 CPU jobs ran 10 at a time on each
2-core box": 30 CPU-only jobs (each asking the config's ``job_cpus``, 1 core) at once on the
same three boxes, each reporting 2 cores, every job running ``--seconds``; the most that ran
at once on one box, and the drain against the ideal (30 jobs / 6 cores). The baseline is the
same run with boxes that report no cores (as the old leader saw every box: never short).
Exits 1 (full run only) if the new leader's job entries per job are over 8 or grow with the
queue (more than 1 apart between sizes), or a 2-core box ran more than 2 such jobs at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from floydd.cluster.config import TEST_CONFIG  # noqa: E402
from floydd.errors import Conflict  # noqa: E402
from floydd.scheduler.placer import ClusterScheduler  # noqa: E402
from floydd.model import FINAL_STATES  # noqa: E402
from tests.harness.pipeline import Boxes  # noqa: E402

GPUS, TARGET = 6, 8.0


class CoreBoxes(Boxes):
    """Boxes whose nodes report ``cpus`` cores (None: none, as an old daemon)."""

    cpus: int | None = None

    def _service(self, node, **kw):
        kw.setdefault("resources", {"gpus": [0, 1], **({"cpus": self.cpus} if self.cpus else {})})
        return super()._service(node, **kw)


class OldLeader(ClusterScheduler):
    """The leader before issue 12: it also commits each queued job's reason when it changes."""

    async def lead_once(self) -> None:
        await super().lead_once()
        state = self.cluster.state
        for key, why in dict(self.waiting).items():
            job = state.jobs.get(key)
            if job is not None and job.state == "queued" and job.waiting_for != why:
                try:
                    await self.cluster.update_job(key, waiting_for=why, timeout=5.0)
                except Conflict:
                    pass


async def run_once(jobs: int, gpus: int, seconds: float, old: bool, cpus: int | None = None) -> dict:
    """``jobs`` jobs of ``gpus`` GPUs each at once, every one running ``seconds``."""
    with tempfile.TemporaryDirectory(prefix="floydd-queue-") as tmp:
        boxes = CoreBoxes(Path(tmp))
        boxes.cpus = cpus
        boxes.config = replace(TEST_CONFIG, heartbeat_interval=5.0, stale_after=20.0)
        try:
            return await _drain(boxes, jobs, gpus, seconds, old)
        finally:
            await boxes.close()


async def _drain(boxes: Boxes, count: int, gpus: int, seconds: float, old: bool) -> dict:
    a, b, c = await boxes.start(3)
    if old:
        for box in (a, b, c):                       # swap the loop's scheduler before it leads again
            box.jobs.scheduler.__class__ = OldLeader
    follower = next(x for x in (a, b, c) if not x.service.is_leader)
    ops: Counter = Counter()
    follower.service.on_apply(lambda e: e.command is not None and ops.update([e.command["op"]]))
    started: dict[tuple, float] = {}
    most: Counter = Counter()                      # box -> the most runs it held at once
    stop = asyncio.Event()

    async def finish_runs() -> None:                # each run lasts ``seconds``, then succeeds
        while not stop.is_set():
            now = time.monotonic()
            for box in (a, b, c):
                most[box.name] = max(most[box.name], len(box.runtime.held))
                for key in list(box.runtime.held):
                    if now - started.setdefault((box.name, key), now) >= seconds:
                        box.runtime.finish(key)
            await asyncio.sleep(0.01)

    finisher = asyncio.create_task(finish_runs())
    ops.clear()
    t0 = time.monotonic()
    keys = [j["id"] for j in await asyncio.gather(*(follower.run("train", gpus=gpus) for _ in range(count)))]
    await boxes.wait_for(lambda: all(all(getattr(x.job(k), "state", None) in FINAL_STATES for k in keys)
                                     for x in (a, b, c)), timeout=60 + 5 * len(keys) * seconds, what="the drain")
    drain = time.monotonic() - t0
    stop.set()
    await finisher
    n = len(keys)
    job_ops = {op: k for op, k in ops.items() if op.startswith("job.")}
    return {"jobs": n, "all": sum(ops.values()) / n, "job": sum(job_ops.values()) / n,
            "ops": {op: k / n for op, k in sorted(job_ops.items())}, "drain": drain,
            "ideal": -(-n // GPUS) * seconds, "most": max(most.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="0 and 12 queued, no target check")
    parser.add_argument("--queued", default=None, help="queue sizes, comma-separated (default 0,60,500)")
    parser.add_argument("--seconds", type=float, default=0.3, help="how long each job runs")
    parser.add_argument("--old-up-to", type=int, default=150, help="largest queue the old leader is run with")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    sizes = [int(q) for q in (args.queued or ("0,12" if args.smoke else "0,60,500")).split(",")]
    print(f"queue_entries: 3 boxes x 2 GPUs (real raft, fake runtime), {GPUS} + Q one-GPU jobs at once, "
          f"each runs {args.seconds:g} s")
    print(f"{'leader':>6} {'queued':>6} {'jobs':>5} {'entries/job':>11} {'job.*/job':>9} {'drain s':>8} "
          f"{'ideal s':>8} {'x ideal':>7}   job ops per job")
    new: list[float] = []
    failed = False
    for queued in sizes:
        for old in (False, True) if queued <= args.old_up_to else (False,):
            r = asyncio.run(run_once(GPUS + queued, 1, args.seconds, old))
            print(f"{'old' if old else 'new':>6} {queued:>6} {r['jobs']:>5} {r['all']:>11.2f} {r['job']:>9.2f} "
                  f"{r['drain']:>8.1f} {r['ideal']:>8.1f} {r['drain'] / r['ideal']:>7.2f}   "
                  + ", ".join(f"{op} {k:.2f}" for op, k in r["ops"].items()))
            if not old:
                new.append(r["job"])
    flat = max(new) - min(new) <= 1.0
    print(f"new leader: job entries per job {', '.join(f'{x:.2f}' for x in new)} at {sizes} queued "
          f"(target: constant, <= {TARGET:g}): {'yes' if flat and max(new) <= TARGET else 'NO'}")
    if not args.smoke and (not flat or max(new) > TARGET):
        failed = True
    jobs = 12 if args.smoke else 30
    print(f"\n{jobs} CPU-only jobs (1 core each) at once on the 3 boxes, each runs {args.seconds:g} s")
    print(f"{'boxes':>22} {'most at once on a box':>21} {'drain s':>8} {'ideal s':>8} {'x ideal':>7}")
    for cpus in (2, None):
        r = asyncio.run(run_once(jobs, 0, args.seconds, False, cpus=cpus))
        print(f"{'report 2 cores' if cpus else 'report no cores (old)':>22} {r['most']:>21} {r['drain']:>8.1f} "
              f"{r['ideal']:>8.1f} {r['drain'] / r['ideal']:>7.2f}")
        if cpus and r["most"] > cpus:
            print(f"FAIL: a {cpus}-core box ran {r['most']} one-core jobs at once")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
