"""The simulated world: a seeded event scheduler with a virtual clock, the nodes and
their drivers, and the end-of-run checks.

One *step* is one event taken off the queue: a node's tick, a message delivery, a
client action or a fault. After ``steps`` events the world heals (network repaired,
crashed nodes restarted, faults off) and must converge: one leader that committed an
entry of its term, every member applied everything. Then the state machines, the
acknowledged writes and the client history are checked.

The driver does what the real one does: persist the ready (one write, one fsync),
then send its messages, then apply, then ``advance()``; a leader's ready marked
``send_early`` sends first, and its fsync completes later, as an event of its own:
messages that arrive meanwhile are stepped (the contract allows it, and it lets a
leader that counted its own unsynced copy commit on it), and a crash may come first.
A crash may strike between the write and the fsync; the simulated disk then forgets
the write.
"""

from __future__ import annotations

import heapq
import random
import traceback
from dataclasses import dataclass, field, replace

from floydd.cluster.raft import (ConfState, EntryKind, RaftConfig, RaftNode,
                                 Role, bootstrap_state)
from floydd.cluster.raft.storage import BOOTSTRAP_INDEX, DurableState

from .checker import SafetyChecker, Violation
from .disk import SimDisk
from .faults import FaultInjector
from .kv import KV
from .linearizability import check_history
from .network import DELIVER, Network
from .profile import Profile
from .workload import Workload

TICK, CLIENT, FAULT, RESTART, CRASH, BACKGROUND, FSYNC = 0, 2, 3, 4, 5, 6, 7
SIM_MUTATIONS = frozenset({"send_before_persist"})   # driver bugs, beside RaftNode's MUTATIONS
_LEADER = Role.LEADER
_CONF_CHANGE = EntryKind.CONF_CHANGE


@dataclass(frozen=True)
class SimConfig:
    seed: int
    steps: int = 2000
    nodes: int = 5                   # hunting seeds use at most 3 (see profile.py)
    raft: RaftConfig | None = None   # None: from the seed's profile
    clients: int | None = None       # None: from the seed's profile
    keys: int | None = None          # None: from the seed's profile
    faults: bool = True
    membership: bool = True
    compact_every: int = 24          # applied entries between snapshots
    heal_ms: int = 30_000            # time allowed to converge once healed
    mutations: frozenset = frozenset()
    network: dict = field(default_factory=dict)   # overrides of the per-seed network profile

    def replay_command(self) -> str:
        cmd = f"python -m tests.sim.run --seed {self.seed} --steps {self.steps} --nodes {self.nodes}"
        for m in sorted(self.mutations):
            cmd += f" --mutation {m}"
        return cmd


@dataclass
class SimResult:
    config: SimConfig
    ok: bool
    error: str = ""
    steps: int = 0
    sim_ms: int = 0
    ops: int = 0
    acked_writes: int = 0
    commits: int = 0
    stats: dict = field(default_factory=dict)

    def line(self) -> str:
        status = "ok" if self.ok else f"FAIL: {self.error.splitlines()[0] if self.error else ''}"
        return (f"seed {self.config.seed}: {status} ({self.steps} steps, {self.sim_ms} ms simulated, "
                f"{self.commits} commits, {self.acked_writes} acked writes, {self.ops} ops)")


class SimNode:
    __slots__ = ("id", "core", "disk", "kv", "up", "incarnation", "seen_commit", "leader_term",
                 "writes", "reads", "read_waits", "crash_in_write", "crash_after_sync",
                 "first_commit_term", "syncing")

    def __init__(self, node_id, disk: SimDisk) -> None:
        self.id = node_id
        self.core: RaftNode | None = None
        self.disk = disk
        self.kv = KV()
        self.up = False
        self.incarnation = 0
        self.seen_commit = 0
        self.leader_term = -1
        self.first_commit_term = -1
        self.writes: dict = {}       # index -> (client, op, term) awaiting apply here
        self.reads: dict = {}        # context -> (client, op) awaiting a ReadState here
        self.read_waits: list = []   # (index, client, op) awaiting applied >= index
        self.crash_in_write = False  # crash between the next write and its fsync
        self.crash_after_sync = False  # crash after the next fsync, before sending
        self.syncing = None          # the ready whose fsync is under way (a leader's)


class Simulation:
    def __init__(self, cfg: SimConfig) -> None:
        self.given = cfg                 # what the replay command repeats
        self.rng = rng = random.Random(cfg.seed)
        self.profile = p = Profile.draw(rng, cfg.faults)
        nodes = min(cfg.nodes, 3) if p.kind == "hunting" else cfg.nodes
        cfg = replace(cfg, raft=cfg.raft or p.raft, clients=cfg.clients or p.clients,
                      keys=cfg.keys or p.keys, nodes=nodes)
        self.cfg = cfg
        self.queue: list = []
        self.seq = 0
        self.now = 0
        self.steps = 0
        self.healing = False
        self.core_mutations = cfg.mutations - SIM_MUTATIONS
        self.send_first = "send_before_persist" in cfg.mutations
        net = dict(drop=p.drop, dup=p.dup, long_delay=p.long_delay, latency_ms=(1, p.latency_hi),
                   long_delay_ms=3 * cfg.raft.election_ticks * cfg.raft.tick_interval_ms,
                   wire=p.wire, hold=p.hold)
        net.update(cfg.network)
        self.net = Network(self, **net)
        self.checker = SafetyChecker()
        conf = ConfState(voters=frozenset(range(1, cfg.nodes + 1)))
        self.nodes: dict = {}
        for i in range(1, cfg.nodes + 1):
            self.nodes[i] = node = SimNode(i, SimDisk(bootstrap_state(conf)))
            self.start(node)
        self.workload = Workload(self, cfg.clients, cfg.keys)
        self.faults = FaultInjector(self) if cfg.faults else None

    # -- the event loop ------------------------------------------------------------------

    def push(self, delay: int, kind: int, a, b=None) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.now + delay, self.seq, kind, a, b))

    def run(self) -> SimResult:
        cfg = self.cfg
        try:
            while self.steps < cfg.steps:
                self.step()
            self.heal_and_converge()
            self.final_checks()
            ok, error = True, ""
        except Violation as v:
            ok, error = False, str(v)
        except Exception:   # a crash of the core is a failure like any other
            ok, error = False, traceback.format_exc()
        wl = self.workload
        return SimResult(self.given, ok, error, self.steps, self.now, len(wl.history), wl.acked,
                         self.checker.max_committed,
                         dict(profile=self.profile.kind, nodes=cfg.nodes, sent=self.net.sent,
                              dropped=self.net.dropped, dup=self.net.duplicated))

    def step(self) -> None:
        t, _, kind, a, b = heapq.heappop(self.queue)
        self.now = t
        self.steps += 1
        if kind == DELIVER:
            node = self.nodes.get(a.to)
            if self.net.arrives(a, node):
                node.core.step(a)
                self.after(node)
        elif kind == TICK:
            if a.up and a.incarnation == b:
                a.core.tick()
                self.after(a)
                self.push(self.cfg.raft.tick_interval_ms, TICK, a, b)
        elif kind == CLIENT:
            self.workload.on_event(a, b)
        elif kind == FAULT:
            if self.faults is not None and not self.healing:
                self.faults.on_event()
        elif kind == RESTART:
            if not a.up and a.incarnation == b:
                self.start(a)
        elif kind == BACKGROUND:
            self.workload.background()
        elif kind == CRASH:
            if a.up and a.incarnation == b and not self.healing:
                self.crash(a, self.restart_delay())
        elif kind == FSYNC:
            if a.up and a.incarnation == b:
                self.synced(a)

    # -- nodes ---------------------------------------------------------------------------

    def start(self, node: SimNode) -> None:
        state: DurableState = node.disk.load()
        core = RaftNode(node.id, rng=random.Random(self.rng.getrandbits(32)), config=self.cfg.raft,
                        state=state, mutations=self.core_mutations)
        node.core = core
        node.kv = KV.restore(state.snapshot.data)
        node.up = True
        node.incarnation += 1
        node.leader_term = -1
        node.seen_commit = core.log.snapshot.index
        self.observe(node)
        self.push(self.rng.randrange(self.cfg.raft.tick_interval_ms), TICK, node, node.incarnation)

    def crash(self, node: SimNode, restart_after: int | None) -> None:
        node.up = False
        node.core = None
        node.disk.crash()
        node.crash_in_write = node.crash_after_sync = False
        node.syncing = None
        self.workload.node_lost(node)
        if restart_after is not None:
            self.push(restart_after, RESTART, node, node.incarnation)

    def restart_delay(self) -> int:
        return self.rng.randint(*self.profile.restart_ms)

    def add_node(self, node_id) -> SimNode:
        """A new, empty node that will learn everything from the leader."""
        node = self.nodes[node_id] = SimNode(node_id, SimDisk(DurableState()))
        self.start(node)
        return node

    def leader(self) -> SimNode | None:
        best = None
        for node in self.nodes.values():
            if node.up and node.core.role == _LEADER and (best is None or node.core.term > best.core.term):
                best = node
        return best

    def snapshot_done(self, m, ok: bool) -> None:
        node = self.nodes.get(m.frm)
        if node is not None and node.up and node.core.term == m.term:
            node.core.report_snapshot(m.to, ok)

    # -- the driver ----------------------------------------------------------------------

    def observe(self, node: SimNode) -> None:
        core = node.core
        log = core.log
        if core.role == _LEADER and node.leader_term != core.term:
            node.leader_term = core.term
            self.checker.on_leader(node.id, core.term, log)
            if self.profile.flap and not self.healing and self.rng.random() < self.profile.flap:
                if self.rng.random() < 0.5:
                    node.crash_after_sync = True     # its first entry durable, never sent
                else:
                    self.push(self.rng.randint(0, 150), CRASH, node, node.incarnation)
        if log.committed > node.seen_commit:
            self.checker.on_commit(node.id, log, node.seen_commit + 1)
            node.seen_commit = log.committed
            p = self.profile
            if p.commit_crash and core.role == _LEADER and not self.healing:
                first = node.first_commit_term != core.term
                node.first_commit_term = core.term
                if self.rng.random() < (p.first_commit_crash if first else p.commit_crash):
                    node.crash_in_write = True

    def after(self, node: SimNode) -> None:
        """Check what the last input changed, then run ready cycles until quiet."""
        self.observe(node)
        core = node.core
        checker, net = self.checker, self.net
        while core.has_ready():
            rd = core.ready()
            if rd.entries:
                checker.on_entries(node.id, core.log, rd.entries)
            early = rd.send_early or self.send_first
            # A leader that crashes right after this fsync (flap) had its messages still
            # queued in the transport: they never leave, early or not.
            hold = node.crash_after_sync and rd.must_sync
            if early and not hold:
                for m in rd.messages:
                    net.send(m)
            node.disk.write(rd.hard_state, rd.entries, rd.snapshot)
            if rd.send_early and rd.must_sync and not self.send_first:
                node.syncing = rd        # a disk's fsync takes 1-5 ms; see synced()
                self.push(self.rng.randint(1, 5), FSYNC, node, node.incarnation)
                return
            if node.crash_in_write and rd.must_sync:
                self.crash(node, self.restart_delay())
                return
            node.disk.fsync()
            if hold:
                self.crash(node, self.restart_delay())
                return
            if not early:
                for m in rd.messages:
                    net.send(m)
            self.finish(node, rd)

    def synced(self, node: SimNode) -> None:
        """A leader's fsync completes (or it crashes first), then its ready cycle goes on."""
        rd, node.syncing = node.syncing, None
        if node.crash_in_write:
            self.crash(node, self.restart_delay())
            return
        node.disk.fsync()
        if node.crash_after_sync:
            self.crash(node, self.restart_delay())
            return
        self.finish(node, rd)
        self.after(node)

    def finish(self, node: SimNode, rd) -> None:
        """Apply a ready whose save is durable, advance, compact."""
        core, workload = node.core, self.workload
        if rd.snapshot is not None:
            node.kv = KV.restore(rd.snapshot.data)
            workload.snapshot_installed(node, rd.snapshot.index)
        if rd.committed_entries:
            kv = node.kv
            for e in rd.committed_entries:
                self.checker.on_apply(node.id, e)
                if e.kind != _CONF_CHANGE:
                    kv.apply(e.data)
                if node.writes:
                    workload.applied(node, e)
        for rs in rd.read_states:
            workload.read_state(node, rs)
        core.advance()
        if node.read_waits:
            workload.serve_reads(node)
        log = core.log
        if log.applied - log.snapshot.index >= self.cfg.compact_every:
            state = node.kv.snapshot()
            snap = core.compact(log.applied, state)
            self.checker.on_snapshot(node.id, snap.index, state)
            node.disk.compact(snap)
        self.observe(node)

    # -- the end of a run ----------------------------------------------------------------

    def heal_and_converge(self) -> None:
        self.healing = True
        net = self.net
        net.heal()
        net.drop = net.dup = net.long_delay = net.hold = 0.0
        for node in list(self.nodes.values()):
            if not node.up:
                self.start(node)
        deadline = self.now + self.cfg.heal_ms
        check_every = self.cfg.raft.tick_interval_ms
        next_check = self.now
        while self.now < deadline:
            if self.now >= next_check:
                if self.converged():
                    return
                next_check = self.now + check_every
            self.step()
        raise Violation(f"no convergence within {self.cfg.heal_ms} ms of healing: "
                        f"{self.describe()}")

    def converged(self) -> bool:
        lead = self.leader()
        if lead is None:
            return False
        log = lead.core.log
        if log.term(log.committed) != lead.core.term or log.committed != log.last_index():
            return False
        for node_id in lead.core.tracker.conf.members:
            node = self.nodes.get(node_id)
            if node is None or not node.up or node.core.log.applied != log.committed:
                return False
        return lead.core.log.applied == log.committed

    def final_checks(self) -> None:
        lead = self.leader()
        members = [self.nodes[n] for n in lead.core.tracker.conf.members]
        for node in members:
            if node.kv.data != lead.kv.data:
                raise Violation(f"state machines differ: node {node.id} {node.kv.data} vs "
                                f"leader {lead.id} {lead.kv.data}")
        applied = self.checker.applied
        reference = KV()
        for i in range(BOOTSTRAP_INDEX + 1, lead.core.log.applied + 1):
            entry = applied.get(i)
            if entry is None:
                raise Violation(f"entry {i} was never applied by any node")
            if entry.kind != _CONF_CHANGE:
                reference.apply(entry.data)
        if reference.data != lead.kv.data:
            raise Violation(f"replaying the committed log gives {reference.data}, "
                            f"the cluster holds {lead.kv.data}")
        self.workload.final_checks(lead)
        bad = check_history(self.workload.history)
        if bad:
            raise Violation(f"client history not linearizable for keys {bad}: "
                            + self.workload.describe(bad[0]))

    def describe(self) -> str:
        parts = []
        for node in self.nodes.values():
            if node.up:
                c = node.core
                parts.append(f"{node.id}:{c.role.name[0]} t{c.term} c{c.log.committed} "
                             f"a{c.log.applied} l{c.log.last_index()} "
                             f"v{sorted(c.tracker.conf.voters)} ln{sorted(c.tracker.conf.learners)}")
            else:
                parts.append(f"{node.id}:down")
        return "; ".join(parts)


def run_seed(seed: int, steps: int = 2000, nodes: int = 5, **kwargs) -> SimResult:
    return Simulation(SimConfig(seed=seed, steps=steps, nodes=nodes, **kwargs)).run()
