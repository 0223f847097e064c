"""The simulated network: per-message latency (so messages reorder), drops,
duplicates, rare long delays, and partitions (possibly one-way) that also cut
messages already in flight. Decisions come from the simulation's seeded rng."""

from __future__ import annotations

import heapq

from floydd.cluster.raft import InstallSnapshot, decode_message, encode_message

DELIVER = 1


class Network:
    __slots__ = ("sim", "rng", "blocked", "drop", "dup", "long_delay", "lat_lo", "lat_hi",
                 "long_hi", "wire", "hold", "held", "sent", "dropped", "duplicated")

    def __init__(self, sim, *, drop: float, dup: float, long_delay: float,
                 latency_ms: tuple[int, int], long_delay_ms: int, wire: bool,
                 hold: float) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.blocked: set = set()            # (frm, to) pairs that cannot talk
        self.drop, self.dup, self.long_delay = drop, dup, long_delay
        self.lat_lo, self.lat_hi = latency_ms
        self.long_hi = long_delay_ms
        self.wire = wire                     # round-trip every message through the codec
        self.hold = hold                     # share of messages a cut link holds until it heals
        self.held: list = []                 # (like TCP retransmitting): delivered late, stale
        self.sent = self.dropped = self.duplicated = 0

    def send(self, m) -> None:
        self.sent += 1
        rng = self.rng
        if self.blocked and (m.frm, m.to) in self.blocked:
            if rng.random() < self.hold:
                self.held.append(m)
            else:
                self._lost(m)
            return
        if self.drop and rng.random() < self.drop:
            self._lost(m)
            return
        if self.wire:
            m = decode_message(encode_message(m))
        self._schedule(m)
        if self.dup and rng.random() < self.dup:
            self.duplicated += 1
            self._schedule(m)

    def _schedule(self, m) -> None:
        random = self.rng.random
        delay = self.lat_lo + int(random() * (self.lat_hi - self.lat_lo + 1))
        if self.long_delay and random() < self.long_delay:
            delay += int(random() * (self.long_hi + 1))
        sim = self.sim
        sim.seq += 1
        heapq.heappush(sim.queue, (sim.now + delay, sim.seq, DELIVER, m, None))

    def arrives(self, m, node) -> bool:
        """At delivery time: is the link still up and the receiver alive? The sender
        of a snapshot learns the outcome, as from a real transport's stream."""
        if node is None or not node.up or (m.frm, m.to) in self.blocked:
            self._lost(m)
            return False
        if type(m) is InstallSnapshot:
            self.sim.snapshot_done(m, True)
        return True

    def _lost(self, m) -> None:
        self.dropped += 1
        if type(m) is InstallSnapshot:
            self.sim.snapshot_done(m, False)

    def partition(self, groups: list[set]) -> None:
        """Only nodes in the same group can talk."""
        self.blocked = {(a, b) for g in groups for h in groups if g is not h for a in g for b in h}
        self._release()

    def cut_one_way(self, frm, to) -> None:
        self.blocked.add((frm, to))

    def heal(self) -> None:
        self.blocked = set()
        self._release()

    def _release(self) -> None:
        """Links back up deliver what they held, in a burst, late."""
        held, self.held = self.held, []
        for m in held:
            if (m.frm, m.to) in self.blocked:
                self.held.append(m)
            else:
                self._schedule(m)
