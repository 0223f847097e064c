"""Timing and sizing knobs of the control plane, each documented where it is defined.

Raft's own knobs (tick, election and heartbeat ticks) are in
:class:`floydd.cluster.raft.RaftConfig`; autopilot's in
:class:`floydd.cluster.driver.autopilot.AutopilotConfig`. :data:`TEST_CONFIG` is the preset for
in-process cluster tests (tight timings on loopback).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from floydd.cluster.driver.autopilot import AutopilotConfig
from floydd.cluster.raft import DEFAULT_CONFIG, RaftConfig

__all__ = ["BOX_RAFT", "ClusterConfig", "DEFAULT_CLUSTER_CONFIG", "TEST_CONFIG"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    raft: RaftConfig = DEFAULT_CONFIG
    """Ticks and timeouts of the raft core; the core's defaults here (50 ms tick, 0.5-1 s election
    timeout), :data:`BOX_RAFT` in :data:`DEFAULT_CLUSTER_CONFIG` (real boxes)."""

    autopilot: AutopilotConfig = field(default_factory=AutopilotConfig)
    """Voter count and grace period for crashed voters."""

    autopilot_interval: float = 1.0
    """Seconds between the leader's autopilot rounds (one membership change per round)."""

    snapshot_every: int = 10_000
    """Applied entries between snapshots of the state machine; the log before a snapshot is
    dropped, and peers that need it get the snapshot instead."""

    archive_after: float = 7 * 24 * 3600.0
    """Seconds after it ended that a finished job leaves the hot replicated state for the archive
    (:mod:`floydd.cluster.archiver`; still listed, from SQLite, by every node)."""

    archive_keep: int = 1000
    """At most this many finished jobs stay hot; older ones are archived sooner than
    ``archive_after``."""

    archive_batch: int = 500
    """Jobs one ``job.archive`` moves at most (a full batch is followed by the next at once)."""

    archive_interval: float = 10.0
    """Seconds between the leader's looks for jobs to archive."""

    propose_timeout: float = 10.0
    """Default seconds a proposal may take to commit, retries and forwarding included."""

    read_timeout: float = 5.0
    """Default seconds a linearizable read (ReadIndex) may take."""

    heartbeat_interval: float = 5.0
    """Seconds between a node's ``node.health`` proposals (its heartbeat in the state)."""

    stale_after: float = 20.0
    """A node whose last heartbeat is older than this is listed as ``stale``."""

    suspect_after: float = 3.0
    """Seconds the leader may go without hearing from a member (raft traffic flows every
    heartbeat tick) before it marks the box ``suspect``: nothing new is placed there, its jobs
    not yet started are placed elsewhere and its running ones become ``unknown``
    (:mod:`floydd.scheduler.outages`)."""

    max_clock_skew: float = 30.0
    """Seconds a box's wall clock may be from the leader's before it is flagged (``floyd
    nodes``, ``floydd members``, ``floydd status``) and logged at WARNING once
    (:mod:`floydd.cluster.clockskew`). No decision reads it: liveness is monotonic."""

    rejoin_interval: float = 2.0
    """Seconds without a leader after which a node asks its peers to add it back as a learner
    (after a restart that followed a clean leave, or a removal by autopilot)."""

    leave_timeout: float = 5.0
    """Seconds a clean shutdown may spend handing over leadership and leaving the voters."""

    transport_queue: int = 4096
    """Raft messages queued per peer before new ones are dropped (raft retransmits)."""

    transport_batch: int = 512
    """Raft messages coalesced into one POST at most."""

    transport_backoff: tuple[float, float] = (0.02, 1.0)
    """First and longest pause, in seconds, after a failed POST to a peer."""

    request_timeout: float = 5.0
    """Seconds one POST of raft messages may take."""

    @property
    def election_timeout(self) -> float:
        """The shortest election timeout, in seconds."""
        return self.raft.election_ticks * self.raft.tick_interval_ms / 1000

    @property
    def leader_lost_after(self) -> float:
        """Seconds without a word from a leader (and from a majority of the voters) after which
        a write on this box is refused at once (:mod:`floydd.cluster.net.leader_contact`): four
        shortest election timeouts, so an election among the boxes it reaches has time to end,
        and at least 2 s, so a loop stalled for a moment (a loaded test machine) is no cut."""
        return max(4 * self.election_timeout, 2.0)


BOX_RAFT = RaftConfig(tick_interval_ms=250, election_ticks=4, heartbeat_ticks=2)
"""Raft timing of real boxes (daemons, devnodes): a heartbeat every 500 ms, an election timeout of
1-2 s (a tick every 250 ms). Issue 23: with the core's 50 ms tick and a heartbeat every tick, an
idle member spent ~4 % of a core, nearly all of it on 20 HTTPS POSTs a second each way; then with
a heartbeat every 250 ms (tick 125 ms) ~1.4 %. Now: heartbeats are frames of a raft stream
(:mod:`floydd.cluster.net.raftstream`), a follower's clock is parked while its leader speaks and a
leader queues its ticks a heartbeat at a time (:mod:`floydd.cluster.driver.clock`). The election
timeout is what sets failover (a dead leader is noticed after 1-2 s); a heartbeat every 500 ms
leaves two in the shortest timeout, and the simulated failover (``bench/raft_failover.py
--boxes``, 1,000 seeds) is the same as with one every 250 ms: median 1040 ms, max 2240 vs 1041,
2176. A late heartbeat costs at most a pre-vote, which followers that heard the leader refuse."""

DEFAULT_CLUSTER_CONFIG = ClusterConfig(raft=BOX_RAFT)

TEST_CONFIG = ClusterConfig(
    raft=RaftConfig(tick_interval_ms=20, election_ticks=10, heartbeat_ticks=2),
    autopilot=AutopilotConfig(grace=1.0, stabilize=0.2, contact_timeout=0.5),
    autopilot_interval=0.1, snapshot_every=200, propose_timeout=10.0, read_timeout=5.0,
    heartbeat_interval=1.0, stale_after=5.0, suspect_after=2.0, rejoin_interval=0.5, leave_timeout=5.0,
    transport_backoff=(0.01, 0.1), request_timeout=2.0)
"""In-process cluster tests: 20 ms ticks (0.2-0.4 s election timeout), 1 s grace."""
