"""Data-driven raft scenarios, in the style of etcd-io/raft's ``testdata/*.txt``.

A file is a list of cases; each case is a command line, a ``----`` line and the
expected output, ended by a blank line (``#`` lines are comments)::

    add-nodes 3 voters=(1,2,3) log=(1) commit=1 term=1
    ----
    ok

    campaign 1
    ----
    ok

Commands (ids are ints; ``(a,b)`` are lists):

    add-nodes N [voters=(..)] [learners=(..)] [log=(terms..)] [term=T] [commit=C]
              [prevote=true] [checkquorum=true] [max-msg-entries=N]
                            N nodes with the next ids. With log=, the log holds those
                            terms from index 1; without, a founding member's state
                            (bootstrap_state: snapshot 1/1); without voters=, an empty
                            node that will join
    campaign ID             start an election
    tick ID [N]             tick N times;  tick-election ID: until its timer fires
    tick-heartbeat ID       one heartbeat interval
    process-ready ID..      persist, send (a cut link drops), apply; prints the ready
    deliver-msgs [ID..] [drop=true]   deliver (or drop) queued messages to IDs
    drop-msgs from=ID       drop queued messages sent by ID
    stabilize [ID..]        process-ready and deliver until nothing moves
    propose ID DATA         propose-conf-change ID add-learner|promote|remove NODE
    transfer-leadership FROM TO        read-index ID CONTEXT        compact ID INDEX
    partition (..) (..)     heal
    crash ID                lose what was not persisted     restart ID
    status [ID..]           raft-log ID..                   check

Every step runs the simulator's safety checker, so a broken rule shows up as a
``violation:`` line. Rewrite expected outputs with ``FLOYDD_REWRITE=1``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from floydd.cluster.raft import (AppendEntries, AppendResponse, ConfChange, ConfChangeOp,
                                 ConfState, Entry, EntryKind, HardState, Heartbeat,
                                 HeartbeatResponse, InstallSnapshot, MemoryStorage,
                                 ProposalDropped, RaftConfig, RaftNode, ReadIndexRequest,
                                 ReadIndexResponse, RequestVote, Snapshot, TimeoutNow,
                                 VoteResponse, bootstrap_state)
from floydd.cluster.raft.storage import DurableState

from .checker import SafetyChecker, Violation

_ARG = re.compile(r"(\S+?)=(\([^)]*\)|\S+)|(\([^)]*\))|(\S+)")


def run_file(path: Path, mutations=frozenset()) -> tuple[str, str]:
    """(expected, actual) text of a scenario file."""
    text = path.read_text()
    scenario = Scenario(mutations)
    out, cases = [], _parse(text)
    for kind, body, expected in cases:
        if kind == "text":
            out.append(body)
            continue
        try:
            got = scenario.execute(body)
        except Violation as v:
            got = f"violation: {v}"
        out.append(f"{body}\n----\n{got.rstrip() or 'ok'}\n")
    return text, "".join(out)


def _parse(text: str):
    lines = text.splitlines(keepends=True)
    i, cases = 0, []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            cases.append(("text", line, None))
            i += 1
            continue
        command = line.rstrip("\n")
        if i + 1 >= len(lines) or lines[i + 1].strip() != "----":
            raise ValueError(f"line {i + 1}: expected ---- after {command!r}")
        i += 2
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        cases.append(("case", command, "".join(expected)))
    return cases


class Scenario:
    def __init__(self, mutations=frozenset()) -> None:
        self.mutations = frozenset(mutations)
        self.nodes: dict = {}        # id -> RaftNode (None while crashed)
        self.storage: dict = {}      # id -> MemoryStorage
        self.configs: dict = {}
        self.mailbox: list = []
        self.blocked: set = set()
        self.checker = SafetyChecker()
        self.seen_commit: dict = {}
        self.out: list = []

    # -- plumbing ------------------------------------------------------------------------

    def execute(self, line: str) -> str:
        self.out = []
        words = line.split(maxsplit=1)
        name, rest = words[0], (words[1] if len(words) > 1 else "")
        args, kwargs = [], {}
        for key, kv, paren, word in _ARG.findall(rest):
            if key:
                kwargs[key] = kv
            else:
                args.append(paren or word)
        handler = getattr(self, "cmd_" + name.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {name!r}")
        handler(*args, **kwargs)
        return "\n".join(self.out)

    def say(self, text: str) -> None:
        self.out.append(text)

    def _observe(self, node_id) -> None:
        core = self.nodes[node_id]
        if core.role.name == "LEADER":
            self.checker.on_leader(node_id, core.term, core.log)
        seen = self.seen_commit.get(node_id, 0)
        if core.log.committed > seen:
            self.checker.on_commit(node_id, core.log, seen + 1)
            self.seen_commit[node_id] = core.log.committed

    def _ids(self, args) -> list:
        return [int(a) for a in args] if args else sorted(i for i, n in self.nodes.items() if n)

    # -- commands ------------------------------------------------------------------------

    def cmd_add_nodes(self, n, voters="()", learners="()", log=None, term="0", commit="0",
                      prevote="true", checkquorum="true", **kw) -> None:
        conf = ConfState(voters=frozenset(_ints(voters)), learners=frozenset(_ints(learners)))
        config = RaftConfig(pre_vote=prevote == "true", check_quorum=checkquorum == "true",
                            max_entries_per_msg=int(kw.get("max-msg-entries", 64)))
        if log is not None:
            entries = tuple(Entry(t, i + 1, b"", EntryKind.NORMAL) for i, t in enumerate(_ints(log)))
            state = DurableState(hard_state=HardState(term=int(term), commit=int(commit)),
                                 snapshot=Snapshot(index=0, term=0, conf=conf), entries=entries)
        elif conf.voters:
            state = bootstrap_state(conf)
        else:
            state = DurableState()
        first = max(self.nodes, default=0) + 1
        for node_id in range(first, first + int(n)):
            self.storage[node_id] = MemoryStorage(state)
            self.configs[node_id] = config
            self._start(node_id)
        self.say("ok")

    def _start(self, node_id) -> None:
        self.nodes[node_id] = RaftNode(node_id, rng=random.Random(node_id),
                                       config=self.configs[node_id],
                                       state=self.storage[node_id].load(), mutations=self.mutations)
        self.seen_commit[node_id] = self.nodes[node_id].log.committed

    def cmd_campaign(self, node_id) -> None:
        self.nodes[int(node_id)].campaign()
        self._observe(int(node_id))

    def cmd_tick(self, node_id, n="1") -> None:
        for _ in range(int(n)):
            self.nodes[int(node_id)].tick()
        self._observe(int(node_id))

    def cmd_tick_election(self, node_id) -> None:
        """Tick until the node's election timer fires (it campaigns, if it may)."""
        core = self.nodes[int(node_id)]
        for _ in range(2 * self.configs[int(node_id)].election_ticks):
            before = core.role, len(core.msgs)
            core.tick()
            if (core.role, len(core.msgs)) != before:
                break
        self._observe(int(node_id))

    def cmd_tick_heartbeat(self, node_id) -> None:
        self.cmd_tick(node_id, str(self.configs[int(node_id)].heartbeat_ticks))

    def cmd_process_ready(self, *ids) -> None:
        for node_id in self._ids(ids):
            self._process(node_id)

    def _process(self, node_id) -> bool:
        core = self.nodes[node_id]
        if core is None or not core.has_ready():
            return False
        rd = core.ready()
        if rd.entries:
            self.checker.on_entries(node_id, core.log, rd.entries)
        self.storage[node_id].save(rd.hard_state, rd.entries, rd.snapshot)
        lines = []
        if rd.soft_state:
            lines.append(f"lead={rd.soft_state.lead} {rd.soft_state.role.name}")
        if rd.hard_state:
            hs = rd.hard_state
            lines.append(f"HardState term={hs.term} vote={hs.vote} commit={hs.commit}")
        if rd.snapshot:
            lines.append(f"Snapshot {rd.snapshot.index}/{rd.snapshot.term}")
        if rd.entries:
            lines.append("Entries: " + " ".join(_entry(e) for e in rd.entries))
        if rd.committed_entries:
            for e in rd.committed_entries:
                self.checker.on_apply(node_id, e)
            lines.append("Committed: " + " ".join(_entry(e) for e in rd.committed_entries))
        for rs in rd.read_states:
            lines.append(f"ReadState index={rs.index} ctx={rs.context.decode()}")
        if rd.messages:
            lines.append("Messages:")
            lines += [f"  {describe(m)}" for m in rd.messages]
        self.mailbox.extend(m for m in rd.messages if (m.frm, m.to) not in self.blocked)
        core.advance()
        self._observe(node_id)
        self.say(f"> {node_id} handling Ready")
        self.out += [f"  {line}" for line in lines]
        return True

    def cmd_deliver_msgs(self, *ids, drop="false") -> bool:
        targets = set(self._ids(ids))
        keep, moved = [], False
        for m in self.mailbox:
            if m.to not in targets:
                keep.append(m)
                continue
            moved = True
            core = self.nodes.get(m.to)
            if drop == "true" or core is None or (m.frm, m.to) in self.blocked:
                self.say(f"dropped: {describe(m)}")
                continue
            self.say(describe(m))
            core.step(m)
            self._observe(m.to)
        self.mailbox = keep
        return moved

    def cmd_drop_msgs(self, **kw) -> None:
        frm = int(kw["from"])
        for m in [m for m in self.mailbox if m.frm == frm]:
            self.say(f"dropped: {describe(m)}")
        self.mailbox = [m for m in self.mailbox if m.frm != frm]

    def cmd_stabilize(self, *ids) -> None:
        ids = self._ids(ids)
        for _ in range(1000):
            moved = False
            for node_id in ids:
                moved |= self._process(node_id)
            if any(m.to in ids for m in self.mailbox):
                self.say("> delivering")
                moved |= self.cmd_deliver_msgs(*map(str, ids))
            if not moved:
                return
        raise AssertionError("stabilize did not settle")

    def cmd_propose(self, node_id, data) -> None:
        try:
            e = self.nodes[int(node_id)].propose(data.encode())
            self.say(f"proposed {_entry(e)}")
        except ProposalDropped as exc:
            self.say(f"dropped: {exc} (leader {exc.leader})")

    def cmd_propose_conf_change(self, node_id, op, node) -> None:
        ops = {"add-learner": ConfChangeOp.ADD_LEARNER, "promote": ConfChangeOp.PROMOTE,
               "remove": ConfChangeOp.REMOVE}
        try:
            e = self.nodes[int(node_id)].propose_conf_change(ConfChange(ops[op], int(node)))
            self.say(f"proposed {_entry(e)}")
        except ProposalDropped as exc:
            self.say(f"rejected: {exc}")

    def cmd_transfer_leadership(self, frm, to) -> None:
        try:
            self.nodes[int(frm)].transfer_leadership(int(to))
        except ProposalDropped as exc:
            self.say(f"rejected: {exc}")

    def cmd_read_index(self, node_id, context) -> None:
        try:
            self.nodes[int(node_id)].read_index(context.encode())
        except ProposalDropped as exc:
            self.say(f"dropped: {exc}")

    def cmd_compact(self, node_id, index) -> None:
        snap = self.nodes[int(node_id)].compact(int(index), b"state@" + index.encode())
        self.storage[int(node_id)].compact(snap)
        self.say(f"snapshot {snap.index}/{snap.term} voters={_set(snap.conf.voters)}")

    def cmd_partition(self, *groups) -> None:
        sets = [set(_ints(g)) for g in groups]
        self.blocked = {(a, b) for g in sets for h in sets if g is not h for a in g for b in h}

    def cmd_heal(self) -> None:
        self.blocked = set()

    def cmd_crash(self, node_id) -> None:
        self.nodes[int(node_id)] = None
        self.mailbox = [m for m in self.mailbox if m.to != int(node_id)]

    def cmd_restart(self, node_id) -> None:
        self._start(int(node_id))

    def cmd_status(self, *ids) -> None:
        for node_id in self._ids(ids):
            c = self.nodes[node_id]
            conf = c.tracker.conf
            self.say(f"{node_id}: {c.role.name} term={c.term} vote={c.vote} lead={c.lead} "
                     f"commit={c.log.committed} applied={c.log.applied} last={c.log.last_index()} "
                     f"voters={_set(conf.voters)}"
                     + (f" learners={_set(conf.learners)}" if conf.learners else ""))

    def cmd_raft_log(self, *ids) -> None:
        for node_id in self._ids(ids):
            log = self.nodes[node_id].log
            head = f"[snap {log.snapshot.index}/{log.snapshot.term}] " if log.snapshot.index else ""
            self.say(f"{node_id}: {head}" + (" ".join(_entry(e) for e in log.entries) or "(empty)"))

    def cmd_check(self) -> None:
        """Logs of all live nodes agree up to the smallest commit index."""
        live = {i: n for i, n in self.nodes.items() if n}
        low = min(n.log.committed for n in live.values())
        for i, n in live.items():
            for j, m in live.items():
                for k in range(max(n.log.snapshot.index, m.log.snapshot.index) + 1, low + 1):
                    if n.log.term(k) != m.log.term(k):
                        raise Violation(f"nodes {i} and {j} differ at committed index {k}")
        self.say(f"ok: committed prefixes agree up to {low}")


def describe(m) -> str:
    head = f"{m.frm}->{m.to}"
    cls = type(m)
    if cls is AppendEntries:
        ents = " ".join(_entry(e) for e in m.entries)
        return f"{head} MsgApp term={m.term} prev={m.index}/{m.log_term} commit={m.commit} [{ents}]"
    if cls is AppendResponse:
        if m.reject:
            return (f"{head} MsgAppResp term={m.term} rejected index={m.index} "
                    f"hint={m.reject_hint}/{m.log_term}")
        return f"{head} MsgAppResp term={m.term} index={m.index}"
    if cls is RequestVote:
        kind = "MsgPreVote" if m.pre else "MsgVote"
        return (f"{head} {kind} term={m.term} last={m.index}/{m.log_term}"
                + (" transfer" if m.transfer else ""))
    if cls is VoteResponse:
        kind = "MsgPreVoteResp" if m.pre else "MsgVoteResp"
        return f"{head} {kind} term={m.term} {'rejected' if m.reject else 'granted'}"
    if cls is Heartbeat:
        return f"{head} MsgHeartbeat term={m.term} commit={m.commit}" + _ctx(m.context)
    if cls is HeartbeatResponse:
        return f"{head} MsgHeartbeatResp term={m.term}" + _ctx(m.context)
    if cls is InstallSnapshot:
        s = m.snapshot
        return f"{head} MsgSnap term={m.term} snapshot={s.index}/{s.term} voters={_set(s.conf.voters)}"
    if cls is TimeoutNow:
        return f"{head} MsgTimeoutNow term={m.term}"
    if cls is ReadIndexRequest:
        return f"{head} MsgReadIndex term={m.term}" + _ctx(m.context)
    if cls is ReadIndexResponse:
        return f"{head} MsgReadIndexResp term={m.term} index={m.index}" + _ctx(m.context)
    return f"{head} {m!r}"


def _entry(e) -> str:
    if e.kind == EntryKind.CONF_CHANGE:
        cc = ConfChange.decode(e.data)
        return f"{e.index}/{e.term}:{cc.op.name.lower()}({cc.node})"
    return f"{e.index}/{e.term}" + (f":{e.data.decode()}" if e.data else "")


def _ctx(context: bytes) -> str:
    return f" ctx={context.decode()}" if context else ""


def _ints(text: str) -> list:
    return [int(x) for x in text.strip("()").replace(",", " ").split()]


def _set(ids) -> str:
    return "(" + ",".join(str(i) for i in sorted(ids)) + ")"
