"""A hand-driven cluster of raft cores for the unit tests: every ready is persisted
to a MemoryStorage before its messages are queued; messages move only when a test
says so."""

from __future__ import annotations

import random

import pytest

from floydd.cluster.raft import (ConfState, MemoryStorage, RaftConfig, RaftNode, Role,
                                 bootstrap_state)


class Cluster:
    def __init__(self, voters, learners=(), *, config: RaftConfig | None = None,
                 mutations=frozenset()) -> None:
        self.config = config or RaftConfig()
        self.conf = ConfState(voters=frozenset(voters), learners=frozenset(learners))
        self.mutations = frozenset(mutations)
        self.storage: dict = {}
        self.nodes: dict = {}
        self.queue: list = []          # messages sent, not yet delivered
        self.applied: dict = {}        # id -> committed entries handed out, in order
        self.read_states: dict = {}
        self.cut: set = set()          # ids that neither send nor receive
        self.delivered: list = []      # every message delivered, in order
        for node_id in sorted(self.conf.members):
            self.add(node_id, bootstrap_state(self.conf))

    def add(self, node_id, state=None) -> RaftNode:
        self.storage[node_id] = MemoryStorage(state)
        self.applied.setdefault(node_id, [])
        self.read_states.setdefault(node_id, [])
        return self.restart(node_id)

    def restart(self, node_id) -> RaftNode:
        node = RaftNode(node_id, rng=random.Random(node_id), config=self.config,
                        state=self.storage[node_id].load(), mutations=self.mutations)
        self.nodes[node_id] = node
        return node

    def __getitem__(self, node_id) -> RaftNode:
        return self.nodes[node_id]

    def process(self, node_id):
        """One ready cycle: persist, queue the messages, apply, advance."""
        node = self.nodes[node_id]
        if not node.has_ready():
            return None
        rd = node.ready()
        self.storage[node_id].save(rd.hard_state, rd.entries, rd.snapshot)
        if node_id not in self.cut:
            self.queue.extend(rd.messages)
        self.applied[node_id].extend(rd.committed_entries)
        self.read_states[node_id].extend(rd.read_states)
        node.advance()
        return rd

    def process_all(self) -> bool:
        return any([self.process(i) is not None for i in sorted(self.nodes)])

    def deliver(self, pred=lambda m: True) -> list:
        """Deliver queued messages matching ``pred``; returns them."""
        taken = [m for m in self.queue if pred(m)]
        self.queue = [m for m in self.queue if not pred(m)]
        for m in taken:
            if m.to in self.nodes and m.to not in self.cut and m.frm not in self.cut:
                self.delivered.append(m)
                self.nodes[m.to].step(m)
        return taken

    def settle(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            moved = self.process_all()
            if self.queue:
                self.deliver()
                moved = True
            if not moved:
                return
        raise AssertionError("cluster did not settle")

    def run_until(self, cond, rounds: int = 100) -> None:
        """Process and deliver one round at a time until ``cond()`` holds."""
        for _ in range(rounds):
            if cond():
                return
            self.process_all()
            self.deliver()
        raise AssertionError("condition never held")

    def elect(self, node_id) -> RaftNode:
        self.nodes[node_id].campaign()
        self.settle()
        assert self.nodes[node_id].role == Role.LEADER
        return self.nodes[node_id]

    def tick(self, node_id, n: int = 1) -> None:
        for _ in range(n):
            self.nodes[node_id].tick()

    def data(self, node_id) -> list:
        return [e.data for e in self.applied[node_id] if e.data and e.kind == 0]


@pytest.fixture
def cluster():
    return Cluster
