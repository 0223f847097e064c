"""Fault injection: partitions (two-sided, isolating the leader, one-way), heals,
crashes (of any node or the leader, some between a write and its fsync) with
restarts, membership changes (add learner, promote, remove voter or learner) and
leadership transfers. A fault every 150-900 ms of simulated time."""

from __future__ import annotations

from floydd.cluster.raft import ConfChange, ConfChangeOp, ProposalDropped

FAULT = 3


class FaultInjector:
    def __init__(self, sim) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.next_id = sim.cfg.nodes + 1
        self.max_id = sim.cfg.nodes + 4
        sim.push(self.rng.randint(200, 1000), FAULT, None)

    def on_event(self) -> None:
        sim, rng = self.sim, self.rng
        r = rng.random()
        if r < 0.20:
            self.partition()
        elif r < 0.36:
            sim.net.heal()
        elif r < 0.50:
            self.crash(rng.choice(list(sim.nodes.values())))
        elif r < 0.60:
            self.crash(sim.leader())
        elif r < 0.68:
            node = rng.choice(list(sim.nodes.values()))
            if node.up:
                node.crash_in_write = True     # dies between its next write and fsync
        elif r < 0.84:
            if sim.cfg.membership:
                self.membership()
        elif r < 0.94:
            self.transfer()
        else:
            ids = list(sim.nodes)
            a, b = rng.sample(ids, 2) if len(ids) > 1 else (ids[0], ids[0])
            sim.net.cut_one_way(a, b)
        sim.push(rng.randint(150, 900), FAULT, None)

    def partition(self) -> None:
        sim, rng = self.sim, self.rng
        ids = list(sim.nodes)
        if len(ids) < 2:
            return
        lead = sim.leader()
        if lead is not None and rng.random() < 0.4:
            sim.net.partition([{lead.id}, set(ids) - {lead.id}])
            return
        rng.shuffle(ids)
        cut = rng.randint(1, len(ids) - 1)
        sim.net.partition([set(ids[:cut]), set(ids[cut:])])

    def crash(self, node) -> None:
        if node is not None and node.up:
            self.sim.crash(node, self.sim.restart_delay())

    def membership(self) -> None:
        sim, rng = self.sim, self.rng
        lead = sim.leader()
        if lead is None:
            return
        conf = lead.core.tracker.conf
        voters, learners = sorted(conf.voters), sorted(conf.learners)
        options = []
        if learners:
            options += ["promote", "promote", "remove_learner"]
        if len(voters) > 3:
            options.append("remove_voter")
        if len(conf.members) < sim.cfg.nodes + 2 and self.next_id <= self.max_id:
            options += ["add", "add"]
        if not options:
            return
        choice = rng.choice(options)
        if choice == "add":
            cc = ConfChange(ConfChangeOp.ADD_LEARNER, self.next_id)
        elif choice == "promote":
            cc = ConfChange(ConfChangeOp.PROMOTE, rng.choice(learners))
        elif choice == "remove_learner":
            cc = ConfChange(ConfChangeOp.REMOVE, rng.choice(learners))
        else:
            cc = ConfChange(ConfChangeOp.REMOVE, rng.choice(voters))
        try:
            lead.core.propose_conf_change(cc)
        except ProposalDropped:
            return
        if choice == "add":
            sim.add_node(self.next_id)
            self.next_id += 1
        sim.after(lead)

    def transfer(self) -> None:
        sim = self.sim
        lead = sim.leader()
        if lead is None:
            return
        others = [v for v in sorted(lead.core.tracker.conf.voters) if v != lead.id]
        if not others:
            return
        lead.core.transfer_leadership(self.rng.choice(others))
        sim.after(lead)
