"""The audit chain (floydd.cluster.state.audit): which commands make entries, and that any single
edit, removal or swap of entries is found, naming the first bad one."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.cluster.state.audit import GENESIS, MemoryAudit, describe, make_entry, verify
from floydd.cluster.state.machine import ClusterState

NODE = {"id": "n1", "name": "box1", "address": "10.0.0.1", "cluster_port": 7000,
        "resources": {"cpus": 8, "memory": 1 << 34, "gpus": [{"index": 0}]}}


def _chain(n: int) -> list[dict]:
    out, prev = [], None
    for i in range(n):
        prev = make_entry({"op": "job.delete", "job": f"p/{i}", "user": f"u{i % 3}", "ts": 1000.0 + i,
                           "proposer": "n1"}, None, 10 + i, prev)
        out.append(prev)
    return out


def test_a_whole_chain_verifies_and_links_each_entry_to_the_one_before():
    chain = _chain(5)
    assert verify(chain) == (5, None)
    assert chain[0]["prev"] == GENESIS and all(b["prev"] == a["hash"] for a, b in zip(chain, chain[1:]))
    assert verify([]) == (0, None)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 12), st.data())
def test_any_single_edit_removal_or_swap_is_found_and_the_first_bad_entry_named(n, data):
    chain = _chain(n)
    kind = data.draw(st.sampled_from(["edit", "remove", "swap"]))
    p = data.draw(st.integers(0, n - 2 if kind == "swap" else (n - 2 if kind == "remove" else n - 1)))
    bad = [dict(e) for e in chain]
    if kind == "edit":
        field = data.draw(st.sampled_from(["who", "op", "what", "ts", "box", "seq", "prev"]))
        bad[p][field] = data.draw(st.sampled_from(["mallory", 7, 99.5, "job.submit"]).filter(
            lambda v: v != bad[p][field]))
    elif kind == "remove":                 # removing the last entry is a truncation: see the docs
        del bad[p]
    else:
        bad[p], bad[p + 1] = bad[p + 1], bad[p]
    position, finding = verify(bad)
    assert finding is not None and position == p + 1
    assert finding.startswith(f"entry {bad[p]['seq']} (")


def test_the_finding_names_the_entry_like_an_operator_reads_it():
    chain = _chain(3)
    chain[1]["who"] = "eve"
    position, finding = verify(chain)
    assert position == 2
    assert finding == f"{describe(chain[1])}: its hash does not match its contents (edited)"
    assert describe(chain[1]).startswith("entry 2 (job.delete by eve at 1970-01-01 00:16:41 UTC")


def test_an_entry_that_is_not_json_any_more_is_named_by_position():
    chain: list = _chain(3)
    chain[2] = "{garbled"
    assert verify(chain) == (3, "entry at position 3: not an audit entry")


def test_changes_made_by_people_are_audited_and_routine_reports_are_not():
    state = ClusterState(protocol=2)
    ops = [({"op": "node.upsert", **NODE, "config": "defaults"}, True),   # a join
           ({"op": "node.upsert", **NODE, "config": "defaults"}, False),  # the same box starting again
           ({"op": "node.upsert", **NODE}, False),                      # an older release says no config
           ({"op": "node.upsert", **NODE, "config": "sandbox=require"}, True),   # its operator changed one
           ({"op": "node.health", "id": "n1", "status": "up"}, False),
           ({"op": "job.submit", "idem_key": "k", "project": "p", "spec": {"project": "p", "command": "x"},
             "user": "alice"}, True),
           ({"op": "job.update", "job": "p/1", "stop_requested": "bob asked", "user": "bob"}, True),
           ({"op": "job.delete", "job": "p/1", "user": "bob"}, True)]
    for i, (cmd, _) in enumerate(ops, 1):
        state.apply({**cmd, "ts": 100.0 + i, "proposer": "n1"}, index=i, term=1)
    entries = state.audit.entries()
    assert [e["index"] for e in entries] == [i for i, (_, yes) in enumerate(ops, 1) if yes]
    assert [(e["op"], e["who"], e["box"]) for e in entries] == [
        ("node.upsert", "node:n1", "n1"), ("node.upsert", "node:n1", "n1"), ("job.submit", "alice", "n1"),
        ("job.update", "bob", "n1"), ("job.delete", "bob", "n1")]
    assert "config=sandbox=require" in entries[1]["what"]
    assert "job=p/1" in entries[2]["what"] and "spec" not in entries[2]["what"]
    assert verify(entries) == (5, None)


def test_a_refused_command_makes_no_entry_and_a_replay_derives_the_same_chain():
    def run(audit):
        state = ClusterState(audit=audit, protocol=2)
        state.apply({"op": "job.submit", "idem_key": "k", "project": "p", "spec": {"project": "p", "command": "x"},
                     "user": "alice", "ts": 1.0, "proposer": "n1"}, index=1, term=1)
        try:
            state.apply({"op": "job.delete", "job": "p/9", "user": "alice", "ts": 2.0, "proposer": "n1"},
                        index=2, term=1)
        except Exception:
            pass
        state.apply({"op": "job.delete", "job": "p/1", "user": "alice", "ts": 3.0, "proposer": "n1"},
                    index=3, term=1)
        return state
    first = run(MemoryAudit())
    assert [e["index"] for e in first.audit.entries()] == [1, 3]
    # a replay over the chain already there (a restart) derives the same entries, byte for byte
    again = run(first.audit)
    assert json.dumps(again.audit.entries()) == json.dumps(first.audit.entries())
