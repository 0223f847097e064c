"""The leader's view of the cluster: membership, per-peer progress, votes and quorums.

Only voters count towards quorums (commit, elections, CheckQuorum, ReadIndex acks);
learners are replicated to like voters but never counted.
"""

from __future__ import annotations

from enum import IntEnum

from .messages import ConfState, NodeId, sorted_ids
from .progress import Progress

__all__ = ["VoteResult", "Tracker"]


class VoteResult(IntEnum):
    PENDING = 0
    WON = 1
    LOST = 2


class Tracker:
    __slots__ = ("conf", "voters", "learners", "progress", "votes", "quorum")

    def __init__(self, conf: ConfState, next_index: int) -> None:
        self.conf = ConfState()
        self.voters: tuple = ()
        self.learners: tuple = ()
        self.progress: dict[NodeId, Progress] = {}
        self.votes: dict[NodeId, bool] = {}
        self.quorum = 1
        self.set_conf(conf, next_index)

    def set_conf(self, conf: ConfState, next_index: int) -> None:
        """Switch membership; peers that stay keep their progress."""
        self.conf = conf
        self.voters = sorted_ids(conf.voters)
        self.learners = sorted_ids(conf.learners)
        self.quorum = len(self.voters) // 2 + 1
        old = self.progress
        self.progress = {}
        for node in self.voters + self.learners:
            pr = old.get(node) or Progress(next_index)
            pr.is_learner = node in conf.learners
            self.progress[node] = pr

    def reset_progress(self, next_index: int) -> None:
        for node, pr in self.progress.items():
            fresh = Progress(next_index, is_learner=pr.is_learner)
            self.progress[node] = fresh

    def is_voter(self, node: NodeId) -> bool:
        return node in self.conf.voters

    def committed_index(self) -> int:
        """The largest index matched by a quorum of voters."""
        if not self.voters:
            return 0
        progress = self.progress
        matches = sorted([progress[v].match for v in self.voters], reverse=True)
        return matches[self.quorum - 1]

    def has_quorum(self, nodes) -> bool:
        return sum(1 for v in self.voters if v in nodes) >= self.quorum

    def quorum_active(self) -> bool:
        progress = self.progress
        return sum(1 for v in self.voters if progress[v].recent_active) >= self.quorum

    def reset_votes(self) -> None:
        self.votes = {}

    def record_vote(self, node: NodeId, granted: bool) -> VoteResult:
        if node not in self.votes:
            self.votes[node] = granted
        return self.tally()

    def tally(self) -> VoteResult:
        granted = rejected = 0
        votes = self.votes
        for v in self.voters:
            answer = votes.get(v)
            if answer is True:
                granted += 1
            elif answer is False:
                rejected += 1
        if granted >= self.quorum:
            return VoteResult.WON
        if rejected > len(self.voters) - self.quorum:
            return VoteResult.LOST
        return VoteResult.PENDING
