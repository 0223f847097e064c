"""Placements per second of ``place()`` alone, against the old ``place()`` in the same run.

    python bench/place_throughput.py [--smoke] [--rounds N]

Clusters of 1,000 and 5,000 healthy nodes x 8 GPUs (--smoke: 100), empty, and a queue that
asks for 10 % more GPUs than they have: every job wanting 1 GPU ("single"), or a seeded mix
of 1 to 8 GPUs ("mixed"). The queue's tail waits: the first job that waits costs one reason
(counting the nodes by what they lack), the rest are queued behind it; placements/s counts
the jobs placed. The
baseline is the function as it was before issue 10 (tests/unit/scheduler/_reference.py:
every job sorts every node). Old and new run the same rounds on the same jobs, interleaved
round by round (the order alternating), and each prints min/median/max placements/s; the
ratio is of the medians. On a queue of over 10,000 jobs both run on the first 4,000 only
(the old one would take a minute on the whole queue); the new one is then also timed alone
on the whole queue (the figure the target is checked on). Both plans are checked
to decide the same (the same placements, the same jobs waiting behind the same job; the
head's words changed on purpose in issue 12, so they are not compared).

Then, the new function alone (issue 12), on the same clusters: "sized", where every node
has 64 cores and 256 GiB, 1 to 8 cores already set aside on a seeded third of them, and
every job of the mixed queue asks 2 cores and 8 GiB per GPU (cores and memory then bind
before GPUs on some nodes, which best fit passes over); and "near", the mixed queue where
every job's data is held by two seeded nodes (the holders are tried first in each heap).
Figures are CPU seconds of this process (the box is shared; one core), min/median/max over
``--rounds`` rounds. Exits 1 if a plan differs, or (full run only) if the new function's
median is under the 50,000 placements/s target.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from floydd.scheduler import NodeSnapshot, PendingJob, place  # noqa: E402
from tests.unit.scheduler import _reference as reference  # noqa: E402
from tests.unit.scheduler.test_placement_same_decisions import decision  # noqa: E402

TARGET = 50_000
GPUS = 8
OLD_PREFIX = 4_000


def queue(nodes: int, mix: str) -> list[PendingJob]:
    """Jobs asking for 10 % more GPUs than the cluster has, so the tail waits."""
    want = nodes * GPUS * 11 // 10
    if mix == "single":
        sizes = [1] * want
    else:
        rng, sizes = random.Random(nodes), []
        while sum(sizes) < want:
            sizes.append(rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 6, 8)))
    return [PendingJob(key=f"p/{i + 1}", gpu_count=g) for i, g in enumerate(sizes)]


def sized(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> tuple[list[NodeSnapshot], list[PendingJob]]:
    """The cluster with cores and memory, some set aside, and a queue that asks for them."""
    rng = random.Random(len(nodes))
    nodes = [NodeSnapshot(name=n.name, gpu_ids=n.gpu_ids, cpu_milli=64_000, memory=256 << 30,
                          cpu_held=rng.choice((0, 0, 0, 56_000, 60_000, 63_000))) for n in nodes]
    return nodes, [PendingJob(key=j.key, gpu_count=j.gpu_count, cpu_milli=2000 * j.gpu_count,
                              memory=(8 << 30) * j.gpu_count)
                   for j in pending]


def near(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> list[PendingJob]:
    rng = random.Random(len(nodes) + 1)
    return [PendingJob(key=j.key, gpu_count=j.gpu_count, near=tuple(n.name for n in rng.sample(nodes, 2)))
            for j in pending]


def timed(fn, nodes, pending, rounds: int):
    """(CPU seconds of each of ``rounds`` rounds, the plan)."""
    times, plan = [], None
    for _ in range(rounds):
        start = time.process_time()
        plan = fn(nodes, pending)
        times.append(time.process_time() - start)
    return times, plan


def interleaved(nodes, pending, rounds: int):
    """The new and the old function on the same input, ``rounds`` rounds each, round by round,
    the order alternating: (new times, new plan, old times, old plan)."""
    new, old, new_plan, old_plan = [], [], None, None
    for r in range(rounds):
        for which in (("new", "old") if r % 2 == 0 else ("old", "new")):
            fn = place if which == "new" else reference.place
            start = time.process_time()
            plan = fn(nodes, pending)
            took = time.process_time() - start
            if which == "new":
                new.append(took)
                new_plan = plan
            else:
                old.append(took)
                old_plan = plan
    return new, new_plan, old, old_plan


def rates(n: int, times: list[float]) -> tuple[float, float, float]:
    """Placements/s (min, median, max) of ``n`` placements over each round's CPU seconds."""
    return n / max(times), n / statistics.median(times), n / min(times)


def _r(three: tuple[float, float, float]) -> str:
    return "/".join(f"{x / 1000:,.1f}k" if x >= 1000 else f"{x:,.0f}" for x in three)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="100 nodes, no target check")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    failed = differ = False
    print(f"place_throughput: healthy nodes x {GPUS} GPUs, empty; CPU time; placements/s min/median/max over "
          f"{args.rounds} rounds, new and old interleaved on the same jobs; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'nodes':>6} {'queue':>7} {'jobs':>7} {'placed':>7} {'new /s':>22}   {'old /s':>20} {'new/old':>8}")
    for size in ((100,) if args.smoke else (1_000, 5_000)):
        nodes = [NodeSnapshot(name=f"node-{i:05d}", gpu_ids=tuple(range(GPUS))) for i in range(size)]
        for mix in ("single", "mixed"):
            pending = queue(size, mix)
            prefix = pending if len(pending) <= 10_000 else pending[:OLD_PREFIX]
            new_t, new_plan, old_t, old_plan = interleaved(nodes, prefix, args.rounds)
            same = (new_plan.placements, [(k, decision(r)) for k, r in new_plan.waiting.items()]) == \
                (old_plan.placements, [(k, decision(r)) for k, r in old_plan.waiting.items()])
            new_r, old_r = rates(len(new_plan.placements), new_t), rates(len(old_plan.placements), old_t)
            print(f"{size:>6} {mix:>7} {len(prefix):>7,} {len(new_plan.placements):>7,} {_r(new_r):>22}   "
                  f"{_r(old_r):>20} {new_r[1] / old_r[1]:>7.0f}x" + ("" if same else "   PLANS DIFFER"))
            if not same:
                failed = differ = True
            rate = new_r[1]
            if prefix is not pending:       # the whole queue: the new function alone (the old takes minutes)
                secs, plan = timed(place, nodes, pending, args.rounds)
                rate = rates(len(plan.placements), secs)[1]
                print(f"{size:>6} {mix:>7} {len(pending):>7,} {len(plan.placements):>7,} "
                      f"{_r(rates(len(plan.placements), secs)):>22}   (the whole queue, new only)")
            if not args.smoke and rate < TARGET:
                print(f"FAIL: {size} nodes, {mix}: {rate:,.0f} placements/s (median) is under the {TARGET:,}/s target")
                failed = True
        for case in ("sized", "near"):
            mixed = queue(size, "mixed")
            snaps, pending = sized(nodes, mixed) if case == "sized" else (nodes, near(nodes, mixed))
            secs, plan = timed(place, snaps, pending, args.rounds)
            three = rates(len(plan.placements), secs)
            rate = three[1]
            print(f"{size:>6} {case:>7} {len(pending):>7,} {len(plan.placements):>7,} {_r(three):>22}   (new only)")
            if not args.smoke and rate < TARGET:
                print(f"FAIL: {size} nodes, {case}: {rate:,.0f} placements/s is under the {TARGET:,}/s target")
                failed = True
    print(f"decisions as the old place()'s: {'no' if differ else 'yes'}; "
          f"target >= {TARGET:,}/s at both sizes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
