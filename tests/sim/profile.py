"""What a seed exercises: network behaviour, fault biases, workload and raft knobs.

Each seed draws a profile from its own rng, so a seed alone reproduces a run. Most
seeds are *mixed* (every knob drawn independently); a quarter are *hunting* seeds:
three nodes, mostly classic Raft (no PreVote/CheckQuorum, as in the paper), entries
trickling one per message, new leaders that die at their most dangerous moments
(FoundationDB-style "buggify"), so that rare interleavings like the Raft paper's
figure 8 come up often enough for the mutation tests to meet them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from floydd.cluster.raft import RaftConfig


@dataclass(frozen=True)
class Profile:
    kind: str
    raft: RaftConfig
    clients: int
    keys: int
    background_ms: int       # blind writes to every self-believed leader every N ms (0: none)
    drop: float              # share of messages lost
    dup: float               # share of messages delivered twice
    long_delay: float        # share of messages delayed up to three election timeouts
    latency_hi: int          # latency is uniform in [1, latency_hi] ms
    hold: float              # share of messages a cut link holds and delivers late on heal
    wire: bool               # round-trip every message through the msgpack codec
    flap: float              # chance a new leader crashes soon (half: right after its first
                             #   fsync, before sending: its first entry durable, never sent)
    first_commit_crash: float  # chance a leader crashes before the fsync after its first commit
    commit_crash: float      # the same after any later commit
    restart_ms: tuple        # crashed nodes come back after this long

    @classmethod
    def draw(cls, rng: random.Random, faults: bool = True) -> "Profile":
        if faults and rng.random() < 0.25:
            return cls.hunting(rng)
        on = faults and rng.random() < 0.33
        return cls(
            kind="mixed",
            raft=RaftConfig(pre_vote=rng.random() < 0.75, check_quorum=rng.random() < 0.75,
                            max_entries_per_msg=rng.choice((1, 2, 64)),
                            max_inflight_msgs=rng.choice((1, 4, 256))),
            clients=rng.randint(2, 5), keys=rng.randint(1, 3),
            background_ms=rng.choice((0, 25, 100)),
            drop=rng.choice((0.0, 0.01, 0.05)), dup=rng.choice((0.0, 0.02, 0.05)),
            long_delay=rng.choice((0.0, 0.01, 0.05)), latency_hi=rng.choice((5, 20, 80)),
            hold=rng.choice((0.0, 0.0, 0.5)), wire=rng.random() < 0.1,
            flap=0.3 if on else 0.0, first_commit_crash=0.3 if on else 0.0,
            commit_crash=0.05 if on else 0.0, restart_ms=(100, 3000))

    @classmethod
    def hunting(cls, rng: random.Random) -> "Profile":
        classic = rng.random() < 0.6
        return cls(
            kind="hunting",
            raft=RaftConfig(pre_vote=not classic and rng.random() < 0.5,
                            check_quorum=not classic and rng.random() < 0.5,
                            max_entries_per_msg=1, max_inflight_msgs=rng.choice((1, 4))),
            clients=rng.randint(2, 4), keys=rng.randint(1, 2), background_ms=25,
            drop=rng.choice((0.0, 0.01)), dup=rng.choice((0.0, 0.02)), long_delay=0.0,
            latency_hi=rng.choice((5, 20)), hold=0.0, wire=False,
            flap=0.8, first_commit_crash=0.8, commit_crash=0.05, restart_ms=(100, 1000))
