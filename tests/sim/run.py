"""Run the simulator from the command line.

    python -m tests.sim.run --seed 1234 --steps 2000 --nodes 5     # replay one seed
    python -m tests.sim.run --seeds 1000                           # the CI set, with figures
    python -m tests.sim.run --smoke                                # a few seconds
    python -m tests.sim.run --soak                                 # 100,000 seeds
    python -m tests.sim.run --seeds 300 --mutation commit_previous_term   # must fail

A failing seed prints the one-line command that replays it; ``--trace`` replays
with every role, term, commit and membership change printed.
"""

from __future__ import annotations

import argparse
import sys
import time

from floydd.cluster.raft.core import MUTATIONS

from .world import SIM_MUTATIONS, SimConfig, Simulation

CI_SEEDS = range(1000)        # the fixed set CI runs (tests/sim/test_sim_ci.py)
SOAK_SEEDS = 100_000


def run_many(seeds, *, steps: int = 2000, nodes: int = 5, mutations=frozenset(),
             stop_at_first: bool = False, out=None):
    """Run ``seeds``; returns (failures, runs, seconds, steps simulated)."""
    failures, runs, total_steps = [], 0, 0
    t0 = time.perf_counter()
    for seed in seeds:
        result = Simulation(SimConfig(seed=seed, steps=steps, nodes=nodes, mutations=mutations)).run()
        runs += 1
        total_steps += result.steps
        if not result.ok:
            failures.append(result)
            if out is not None:
                print(f"FAIL seed {seed}: {result.error.strip().splitlines()[-1][:300]}\n"
                      f"  replay: {result.config.replay_command()}", file=out, flush=True)
            if stop_at_first:
                break
    return failures, runs, time.perf_counter() - t0, total_steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="run this one seed")
    ap.add_argument("--seeds", type=int, help="run this many seeds, from --first")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2000, help="events per run (default 2000)")
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--mutation", action="append", default=[],
                    choices=sorted(MUTATIONS | SIM_MUTATIONS), help="break one rule on purpose")
    ap.add_argument("--smoke", action="store_true", help="50 seeds, a few seconds")
    ap.add_argument("--soak", action="store_true", help=f"{SOAK_SEEDS:,} seeds")
    ap.add_argument("--trace", action="store_true", help="with --seed: print state changes")
    args = ap.parse_args(argv)
    mutations = frozenset(args.mutation)

    if args.seed is not None:
        cfg = SimConfig(seed=args.seed, steps=args.steps, nodes=args.nodes, mutations=mutations)
        sim = Simulation(cfg)
        if args.trace:
            _install_trace(sim)
        result = sim.run()
        print(result.line(), result.stats)
        if not result.ok:
            print(result.error)
            print(f"replay: {cfg.replay_command()}")
        return 0 if result.ok else 1

    if args.soak:
        seeds = range(args.first, args.first + SOAK_SEEDS)
    elif args.smoke:
        seeds = range(args.first, args.first + 50)
    elif args.seeds:
        seeds = range(args.first, args.first + args.seeds)
    else:
        seeds = CI_SEEDS
    failures, runs, secs, steps = run_many(seeds, steps=args.steps, nodes=args.nodes,
                                           mutations=mutations, out=sys.stdout)
    print(f"{runs} runs of {args.steps} steps ({args.nodes} nodes"
          f"{', mutations ' + ','.join(sorted(mutations)) if mutations else ''}): "
          f"{len(failures)} failed, {secs:.1f} s on one core = {runs / secs * 60:,.0f} runs/min, "
          f"{steps / secs:,.0f} steps/s")
    return 1 if failures else 0


def _install_trace(sim: Simulation) -> None:
    """Print each node's (role, term, commit, last index, voters, learners) on change."""
    seen: dict = {}
    after, crash, start = sim.after, sim.crash, sim.start

    def show(node, what=""):
        c = node.core
        state = None if c is None else (c.role.name, c.term, c.log.committed, c.log.last_index(),
                                        sorted(c.tracker.conf.voters), sorted(c.tracker.conf.learners))
        if what or seen.get(node.id) != state:
            seen[node.id] = state
            print(f"{sim.now:>7} ms  node {node.id} {what or state}")

    def traced_after(node):
        after(node)
        show(node)

    def traced_crash(node, restart_after):
        show(node, f"CRASH (restart in {restart_after} ms)")
        crash(node, restart_after)

    def traced_start(node):
        start(node)
        show(node, "START")

    sim.after, sim.crash, sim.start = traced_after, traced_crash, traced_start


if __name__ == "__main__":
    sys.exit(main())
