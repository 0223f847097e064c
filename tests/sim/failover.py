"""Simulated failover: from the leader's crash to a new leader committing.

A healthy cluster (LAN latency 1-5 ms, no loss) with the default timing settings
runs until a leader has committed in its term; the leader then crashes at a random
moment, and the clock runs until another node leads a higher term and has committed
an entry of that term (its no-op): from then on it serves writes and reads.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from floydd.cluster.raft import DEFAULT_CONFIG, RaftConfig, Role

from .world import SimConfig, Simulation

LAN = dict(drop=0.0, dup=0.0, long_delay=0.0, hold=0.0, latency_ms=(1, 5), wire=False)


@dataclass(frozen=True)
class Failover:
    seed: int
    ms: int
    ticks: float


def measure(seed: int, *, nodes: int = 5, raft: RaftConfig = DEFAULT_CONFIG) -> Failover:
    sim = Simulation(SimConfig(seed=seed, nodes=nodes, raft=raft, faults=False, network=LAN))
    warmup = 600 + sim.rng.randrange(1000)
    while True:
        sim.step()
        lead = sim.leader()
        if sim.now >= warmup and lead is not None and _committed_in_term(lead):
            break
    old_term = lead.core.term
    sim.crash(lead, None)
    crashed_at = sim.now
    while True:
        sim.step()
        for node in sim.nodes.values():
            if (node.up and node.core.role == Role.LEADER and node.core.term > old_term
                    and _committed_in_term(node)):
                ms = sim.now - crashed_at
                return Failover(seed, ms, ms / raft.tick_interval_ms)
        if sim.now - crashed_at > 60_000:
            raise AssertionError(f"seed {seed}: no new leader within 60 s")


def _committed_in_term(node) -> bool:
    log = node.core.log
    return log.term(log.committed) == node.core.term


def summary(results: list[Failover]) -> dict:
    ms = sorted(r.ms for r in results)
    return dict(runs=len(ms), median_ms=statistics.median(ms), p99_ms=ms[int(len(ms) * 0.99) - 1],
                max_ms=ms[-1], median_ticks=statistics.median(r.ticks for r in results),
                max_ticks=max(r.ticks for r in results))
