"""store.epoch (floydd.cluster.state.keyepochs): numbered in log order, an admin's, level 3 only."""

from __future__ import annotations

import pytest

from floydd.cluster.state import commands, keyepochs
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, Forbidden

TERM = 3
A, B = "a" * 16, "b" * 16
FP1, FP2 = "0123456789abcdef", "fedcba9876543210"


class Lab:
    def __init__(self, protocol=3, admins=("root",)):
        self.state = ClusterState(protocol=protocol)
        self.index = 0
        for nid in (A, B):
            self.apply({"op": "node.upsert", "id": nid, "name": f"box-{nid[0]}", "address": "10.0.0.1",
                        "cluster_port": 7654}, nid)
        for user in admins:
            self.apply({"op": "admin.grant", "user": user, "term": TERM}, A)

    def apply(self, cmd, proposer):
        self.index += 1
        full = {"ts": float(self.index), **cmd, "proposer": proposer}
        return self.state.apply(commands.check(full), index=self.index, term=TERM)


def epoch(n, fp=FP1, made_on=A, **kw):
    return {"op": "store.epoch", "epoch": n, "fingerprint": fp, "made_on": made_on, **kw}


def test_epochs_are_numbered_in_log_order_and_survive_a_snapshot():
    lab = Lab(admins=())                   # a lab of one: its user acts as its admin
    assert keyepochs.current(lab.state) == 0
    rec = lab.apply(epoch(1, reason="rotate"), A)
    assert rec["epoch"] == 1 and rec["fingerprint"] == FP1 and rec["made_on"] == A
    with pytest.raises(Conflict) as info:   # a second rotation that picked the same number
        lab.apply(epoch(1, FP2, B), B)
    assert info.value.code == "epoch_taken"
    lab.apply(epoch(2, FP2, B), B)
    again = ClusterState(protocol=3)
    again.restore(lab.state.snapshot())
    assert [r["fingerprint"] for r in again.store_epochs] == [FP1, FP2] and keyepochs.current(again) == 2
    assert keyepochs.record(again, 1)["made_on"] == A and keyepochs.record(again, 3) is None


def test_only_an_admin_starts_an_epoch_and_only_on_the_box_holding_its_secret():
    lab = Lab()
    assert refused(lab, epoch(1, user="bob"), A).code == "not_an_admin"
    assert refused(lab, epoch(1, made_on=B, user="root"), A).code == "not_its_own"
    assert lab.apply(epoch(1, user="root"), A)["by"] == "root"


def test_refused_below_level_3_alike_on_every_box():
    lab = Lab(protocol=2, admins=())
    with pytest.raises(Conflict) as info:
        lab.apply(epoch(1), A)
    assert info.value.code == "cluster_too_old" and lab.state.store_epochs == []
    assert b"store_epochs" not in lab.state.snapshot()       # a level-2 snapshot stays as 0.2 writes it


def test_a_malformed_fingerprint_is_refused():
    lab = Lab(admins=())
    with pytest.raises(Exception):
        lab.apply(epoch(1, fp="zz"), A)
    assert lab.state.store_epochs == []


def refused(lab, cmd, proposer) -> Forbidden:
    before = lab.state.snapshot()
    with pytest.raises(Forbidden) as info:
        lab.apply(cmd, proposer)
    assert lab.state.snapshot() == before
    return info.value
