"""The deliberate bugs :class:`~floydd.cluster.raft.core.RaftNode` can be built with
(``mutations=``), so the simulator's mutation tests can show that they catch each one."""

from __future__ import annotations

__all__ = ["MUTATIONS"]

MUTATIONS = frozenset({
    "stale_votes",             # tally votes from earlier rounds: older terms, the pre-vote
    "commit_previous_term",    # commit an older term's entry by counting replicas (fig. 8)
    "vote_without_log_check",  # grant votes to candidates whose log is behind ours
    "append_without_match",    # accept AppendEntries without checking (index, log_term)
    "read_without_quorum",     # answer ReadIndex without confirming leadership
    "count_self_unsynced",     # a leader counts its own entries before they are durable
})
"""Deliberate bugs for the simulator's mutation tests; never set outside tests."""
