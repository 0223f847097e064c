"""Clients of the simulated cluster: a key-value register workload.

Each client runs one operation at a time: a write (a log entry, acknowledged when
the node it went to applies that entry with its term) or a read (ReadIndex, served
once the node has applied up to the read index). Operations that time out, or whose
node crashes, have an unknown outcome: writes stay in the history as possibly done,
reads are dropped. A write whose index ends up holding another entry definitely
failed and leaves the history.
"""

from __future__ import annotations

from floydd.cluster.raft import ProposalDropped, Role

from .checker import Violation
from .kv import encode_put
from .linearizability import INF, Op

CLIENT = 2
BACKGROUND = 6
BACKGROUND_KEY = -1      # written blindly, never read: outside the checked history


class Client:
    __slots__ = ("id", "gen", "op", "hint", "seq")

    def __init__(self, client_id: int) -> None:
        self.id = client_id
        self.gen = 0          # bumped at every transition; stale events are ignored
        self.op: Op | None = None
        self.hint = None      # the node believed to lead
        self.seq = 0


class Workload:
    def __init__(self, sim, clients: int, keys: int) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.keys = keys
        raft = sim.cfg.raft
        self.timeout = 2 * raft.election_ticks * raft.tick_interval_ms
        self.clients = [Client(i) for i in range(clients)]
        self.history: list[Op] = []
        self.clock = 0
        self.acked = 0
        self.acked_writes: list = []      # (index, term, op)
        for c in self.clients:
            sim.push(self.rng.randrange(200), CLIENT, c, c.gen)
        # Background load: blind writes to every node that believes it leads (a deposed
        # leader too), so logs diverge the way the paper's figures 7 and 8 show.
        self.background_ms = sim.profile.background_ms
        self.background_seq = 0
        if self.background_ms:
            sim.push(self.rng.randrange(self.background_ms), BACKGROUND, None)

    def _now(self) -> int:
        self.clock += 1
        return self.clock

    def on_event(self, c: Client, gen: int) -> None:
        if gen != c.gen:
            return
        if c.op is None:
            self._issue(c)
        else:
            self._done(c)          # timed out: outcome unknown

    def background(self) -> None:
        sim = self.sim
        if sim.healing:
            return
        for node in list(sim.nodes.values()):
            if node.up and node.core.role == Role.LEADER and node.core.lead_transferee is None:
                self.background_seq += 1
                node.core.propose(encode_put(-1, self.background_seq, BACKGROUND_KEY, self.background_seq))
                sim.after(node)
        sim.push(self.background_ms, BACKGROUND, None)

    def _done(self, c: Client, pause: int | None = None) -> None:
        c.op = None
        c.gen += 1
        if not self.sim.healing:
            self.sim.push(pause if pause is not None else self.rng.randint(5, 150), CLIENT, c, c.gen)

    def _pick(self, c: Client):
        nodes = self.sim.nodes
        rng = self.rng
        if c.hint is not None and rng.random() < 0.85:
            node = nodes.get(c.hint)
            if node is not None and node.up:
                return node
        up = [n for n in nodes.values() if n.up]
        return rng.choice(up) if up else None

    def _issue(self, c: Client) -> None:
        sim, rng = self.sim, self.rng
        if sim.healing:
            return
        node = self._pick(c)
        if node is None:
            self._done(c, 50)
            return
        c.seq += 1
        key = rng.randrange(self.keys)
        try:
            if rng.random() < 0.5:
                value = c.id * 1_000_000 + c.seq
                entry = node.core.propose(encode_put(c.id, c.seq, key, value))
                op = Op(c.id, key, True, value, self._now())
                self.history.append(op)
                node.writes[entry.index] = (c, op, entry.term)
            else:
                context = b"%d:%d" % (c.id, c.seq)
                node.core.read_index(context)
                op = Op(c.id, key, False, None, self._now())
                node.reads[context] = (c, op)
        except ProposalDropped as exc:
            c.hint = exc.leader
            self._done(c, rng.randint(5, 50))
            return
        c.op = op
        c.hint = node.id
        c.gen += 1
        sim.push(self.timeout, CLIENT, c, c.gen)
        sim.after(node)

    # -- what nodes report ---------------------------------------------------------------

    def applied(self, node, entry) -> None:
        waiting = node.writes.pop(entry.index, None)
        if waiting is None:
            return
        c, op, term = waiting
        if entry.term == term:
            if op.ret == INF:
                op.ret = self._now()
            self.acked += 1
            self.acked_writes.append((entry.index, term, op))
            if c.op is op:
                self._done(c)
        else:
            self.history.remove(op)     # another entry holds its index: it never happened
            if c.op is op:
                self._done(c)

    def read_state(self, node, rs) -> None:
        waiting = node.reads.pop(rs.context, None)
        if waiting is not None:
            node.read_waits.append((rs.index, *waiting))

    def serve_reads(self, node) -> None:
        applied = node.core.log.applied
        keep = []
        for index, c, op in node.read_waits:
            if index > applied:
                keep.append((index, c, op))
            elif c.op is op:
                op.value = node.kv.data.get(op.key)
                op.ret = self._now()
                self.history.append(op)
                self._done(c)
        node.read_waits = keep

    def snapshot_installed(self, node, index: int) -> None:
        for i in [i for i in node.writes if i <= index]:
            c, op, _ = node.writes.pop(i)
            if c.op is op:
                self._done(c)

    def node_lost(self, node) -> None:
        for c, op, _ in node.writes.values():
            if c.op is op:
                self._done(c)
        for c, op in node.reads.values():
            if c.op is op:
                self._done(c)
        for _, c, op in node.read_waits:
            if c.op is op:
                self._done(c)
        node.writes, node.reads, node.read_waits = {}, {}, []

    # -- the end -------------------------------------------------------------------------

    def final_checks(self, lead) -> None:
        log = lead.core.log
        applied = self.sim.checker.applied
        for index, term, op in self.acked_writes:
            if index > log.committed:
                raise Violation(f"acknowledged write lost: {op} at index {index} is past the "
                                f"final commit index {log.committed}")
            entry = applied.get(index)
            if entry is None or entry.term != term:
                raise Violation(f"acknowledged write lost: {op} at index {index} term {term}, "
                                f"the log holds {entry}")
            t = log.term(index)
            if t is not None and t != term:
                raise Violation(f"acknowledged write lost: leader's log has term {t} at {index}")

    def describe(self, key) -> str:
        ops = sorted((op for op in self.history if op.key == key), key=lambda o: o.call)
        return "; ".join(f"c{op.client} {'w' if op.write else 'r'}({op.value}) [{op.call},{op.ret}]"
                         for op in ops[:60])
