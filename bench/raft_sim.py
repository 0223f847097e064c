"""Seeded simulator runs per minute on one core.

Runs the CI seed set (1,000 seeds x 2,000 steps, 5 nodes) and prints runs/min and
steps/s; ``--smoke`` runs 50 seeds, ``--soak`` 100,000. Baseline, same run: the same
number of events through the bare scheduler (heap push/pop, no raft), showing what
share of the time the cores, the checks and the workload take.

    python bench/raft_sim.py [--smoke | --soak]
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sim.run import CI_SEEDS, SOAK_SEEDS, run_many  # noqa: E402


def bare_scheduler(events: int) -> float:
    queue, seq = [], 0
    t0 = time.perf_counter()
    for i in range(16):
        heapq.heappush(queue, (i, i, 0, None, None))
    for _ in range(events):
        t, _, kind, a, b = heapq.heappop(queue)
        seq += 1
        heapq.heappush(queue, (t + 7, seq, kind, a, b))
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--soak", action="store_true")
    args = ap.parse_args(argv)
    seeds = range(50) if args.smoke else range(SOAK_SEEDS) if args.soak else CI_SEEDS
    failures, runs, secs, steps = run_many(seeds, out=sys.stdout)
    base = bare_scheduler(steps)
    print(f"{runs:,} runs x 2,000 steps (5 nodes; seeds {seeds.start}..{seeds.stop - 1}): "
          f"{len(failures)} failed")
    print(f"  {secs:.1f} s on one core = {runs / secs * 60:,.0f} runs/min, {steps / secs:,.0f} steps/s, "
          f"{secs / runs * 1000:.1f} ms per run")
    print(f"  baseline: bare scheduler {steps / base:,.0f} events/s; the simulation costs "
          f"{secs / base:.0f}x that")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
