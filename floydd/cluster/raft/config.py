"""Raft timing and flow-control knobs, each documented where it is defined.

The core never reads a clock: the driver calls ``tick()`` every
``tick_interval_ms`` and all timeouts below are counted in ticks. With the
defaults a follower that stops hearing from its leader campaigns after a
random 500-1000 ms, and a leader cut off from a quorum steps down within two
election timeouts (at most 1 s + 1 s).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RaftConfig", "DEFAULT_CONFIG"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    tick_interval_ms: int = 50
    """How often the driver calls ``tick()``. Only the driver and the figures use it;
    50 ms suits a LAN of workstations (round trips well under one tick)."""

    election_ticks: int = 10
    """Election timeout ``E`` in ticks. A follower or candidate campaigns after a
    randomized timeout drawn from ``[E, 2E)`` ticks without hearing from a leader
    (10 ticks x 50 ms = 500-1000 ms). A follower that heard from a leader within the
    last ``E`` ticks refuses (pre-)votes (leader lease, with ``check_quorum``). A
    leader checks every ``E`` ticks that a quorum was recently active, and a
    leadership transfer that has not finished within ``E`` ticks is abandoned."""

    heartbeat_ticks: int = 1
    """Leader heartbeat interval in ticks; must be well below ``election_ticks``.
    Heartbeats also carry the commit index, ReadIndex contexts and re-probe peers."""

    pre_vote: bool = True
    """Run a PreVote round (at term+1 without bumping anyone's term) before a real
    election, so a node returning from a partition cannot disrupt a working leader."""

    check_quorum: bool = True
    """A leader steps down when it has not heard from a quorum within an election
    timeout; followers ignore vote requests while their leader's lease holds."""

    max_entries_per_msg: int = 64
    """At most this many entries in one AppendEntries."""

    max_bytes_per_msg: int = 1 << 20
    """AppendEntries stop growing past this many payload bytes (at least one entry)."""

    max_inflight_msgs: int = 256
    """Optimistic AppendEntries in flight to one peer in replicate state before the
    leader waits for acknowledgements."""

    max_committed_per_ready: int = 4096
    """At most this many committed entries handed to the application per ready."""

    def __post_init__(self) -> None:
        if self.heartbeat_ticks < 1:
            raise ValueError("heartbeat_ticks must be >= 1")
        if self.election_ticks <= self.heartbeat_ticks:
            raise ValueError("election_ticks must be greater than heartbeat_ticks")
        if self.max_entries_per_msg < 1 or self.max_inflight_msgs < 1:
            raise ValueError("max_entries_per_msg and max_inflight_msgs must be >= 1")
        if self.tick_interval_ms < 1 or self.max_committed_per_ready < 1:
            raise ValueError("tick_interval_ms and max_committed_per_ready must be >= 1")


DEFAULT_CONFIG = RaftConfig()
