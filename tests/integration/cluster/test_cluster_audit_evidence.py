"""The audit chain keeps evidence (floydd.cluster.audit_guard): a box's stored chain edited while
it was down is reported at its next start (an ERROR line naming the first differing entry, the
copy as found kept aside, an ``audit.tamper`` entry in the chain) whether an entry was edited,
the newest entries removed or an entry rewritten with every later hash recomputed; a clean
restart reports nothing; and every box's heartbeat carries its chain's head, which the others
compare at the same seq, so a box holding another chain is flagged and one merely behind is not.

Real raft drivers over mTLS, SQLite logs (tests/harness/cluster.py).
"""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

from floydd.cluster.state.audit import entry_hash, verify
from floydd.cluster.tables.audit_db import read_chain
from floydd.cluster.audit_evidence import Head
from floydd.cli.audit import read_export
from floydd.errors import Forbidden
from tests.harness.cluster import fast

SPEC = {"project": "m", "command": "true"}
REPLAYED = fast(snapshot_every=10_000)          # every entry is replayed at start
COMPACTED = fast(snapshot_every=30)             # the first entries are behind a snapshot


def _db(node):
    return node.service.state_dir / "raft.db"


def _chain(node) -> list:
    return read_chain(_db(node))


async def _people_act(node, n: int, who: str = "alice") -> None:
    for i in range(n):
        job = await node.service.submit_job(SPEC, f"{who}{i}", user=who)
        await node.service.update_job(job["id"], state="stopped", stop_requested=f"{who} asked", user=who)
        await node.service.delete_job(job["id"], user=who)


async def _box_with_a_chain(cluster, n: int = 3):
    (node,) = await cluster.start(1)
    await _people_act(node, n)
    await cluster.wait_for(lambda: sum(e["who"] == "alice" for e in _chain(node)) == 3 * n,
                           what="alice's entries written")
    return node


def _write(node, rows: list[dict]) -> None:
    """Store ``rows`` as the disk's owner would: the same JSON, in place."""
    db = sqlite3.connect(_db(node))
    with db:
        for e in rows:
            db.execute("UPDATE audit SET entry = ? WHERE idx = ?",
                       (json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False), e["index"]))
    db.close()


def _rehashed(chain: list[dict], at: int, **fields) -> list[dict]:
    out = [dict(e) for e in chain]
    out[at].update(fields)
    for i in range(at, len(out)):
        if i:
            out[i]["prev"] = out[i - 1]["hash"]
        out[i]["hash"] = entry_hash(out[i])
    return out[at:]


async def _restarted(cluster, node):
    node = await cluster.restart(node)
    await cluster.wait_for(lambda: node.service.audit_guard.checked, what="the start check to end")
    return node


async def _reported(cluster, node, seq: int, caplog) -> dict:
    """What every report of an edit at ``seq`` says: the log line, the copy kept, the status
    warning and the chain's own ``audit.tamper`` entry; returns that entry."""
    guard = node.service.audit_guard
    assert guard.found is not None and guard.found.seq == seq, guard.found
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "AUDIT CHAIN EDITED" in
              r.getMessage()]
    assert len(errors) == 1 and f"entry {seq}" in errors[0] and str(guard.kept) in errors[0], errors
    assert guard.kept.parent == node.service.state_dir and guard.kept.name.startswith("audit-tampered-")
    await cluster.wait_for(lambda: guard.recorded, what="the audit.tamper entry to commit")
    warning = guard.warnings()[0]
    assert warning.startswith("this box's stored audit chain was edited: ") and str(guard.kept) in warning
    await cluster.wait_for(lambda: any(e["op"] == "audit.tamper" for e in _chain(node)), what="the entry stored")
    tamper = next(e for e in _chain(node) if e["op"] == "audit.tamper")
    assert tamper["box"] == node.id and tamper["who"] == f"node:{node.id}" and f"first_seq={seq}" in tamper["what"]
    return tamper


async def test_an_edited_entry_is_reported_at_start_kept_aside_and_written_again_from_the_log(make_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="floydd.cluster")
    cluster = make_cluster(REPLAYED)
    node = await _box_with_a_chain(cluster)
    before = _chain(node)
    stop = next(e for e in before if e["op"] == "job.update" and e["who"] == "alice")
    await cluster.kill(node)
    _write(node, [dict(stop, who="mallory")])                  # no hash recomputed
    node = await _restarted(cluster, node)

    await _reported(cluster, node, stop["seq"], caplog)
    assert node.service.audit_guard.found.what.endswith("(who: stored 'mallory', derived 'alice')")
    kept = read_export(node.service.audit_guard.kept)          # the copy as found: the edit is in it
    assert kept[:len(before)] == [dict(stop, who="mallory") if e["seq"] == stop["seq"] else e for e in before]
    assert verify(kept)[1].startswith(f"entry {stop['seq']} (job.update by mallory")
    after = _chain(node)                                       # the log is the record: written again
    assert after[:len(before)] == before and verify(after) == (len(after), None)


async def test_the_newest_entries_removed_are_reported_at_start(make_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="floydd.cluster")
    cluster = make_cluster(REPLAYED)
    node = await _box_with_a_chain(cluster)
    before = _chain(node)
    await cluster.kill(node)
    db = sqlite3.connect(_db(node))
    with db:
        db.execute("DELETE FROM audit WHERE seq > ?", (len(before) - 2,))
    db.close()
    assert verify(_chain(node)) == (len(before) - 2, None)     # what verify alone sees: a whole chain
    node = await _restarted(cluster, node)

    await _reported(cluster, node, len(before) - 1, caplog)
    assert "removed" in node.service.audit_guard.found.what
    assert len(read_export(node.service.audit_guard.kept)) == len(before) - 2
    assert _chain(node)[:len(before)] == before


async def test_a_rewrite_with_every_later_hash_recomputed_is_reported_at_start(make_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="floydd.cluster")
    cluster = make_cluster(REPLAYED)
    node = await _box_with_a_chain(cluster)
    before = _chain(node)
    at = next(i for i, e in enumerate(before) if e["op"] == "job.delete")
    await cluster.kill(node)
    _write(node, _rehashed(before, at, who="mallory"))
    assert verify(_chain(node)) == (len(before), None)
    node = await _restarted(cluster, node)

    await _reported(cluster, node, before[at]["seq"], caplog)
    assert "who: stored 'mallory', derived 'alice'" in node.service.audit_guard.found.what
    assert _chain(node)[:len(before)] == before


async def test_a_rehashed_rewrite_behind_the_snapshot_is_found_by_the_head_record(make_cluster, caplog):
    """Entries before the last snapshot cannot be derived again; the head record the store
    wrote with them can tell that the chain it ends with is not the one written."""
    caplog.set_level(logging.WARNING, logger="floydd.cluster")
    cluster = make_cluster(COMPACTED)
    node = await _box_with_a_chain(cluster, n=12)                # past snapshot_every: compacted
    before = _chain(node)
    await cluster.wait_for(lambda: node.driver.status().snapshot_index > before[4]["index"],
                           what="the entry to rewrite behind the snapshot")
    await cluster.kill(node)
    _write(node, _rehashed(before, 4, who="mallory"))
    assert verify(_chain(node)) == (len(before), None)
    node = await _restarted(cluster, node)

    tamper = await _reported(cluster, node, before[-1]["seq"], caplog)
    assert "rewritten" in node.service.audit_guard.found.what
    assert tamper["seq"] > len(before)


async def test_clean_and_abrupt_restarts_report_nothing(make_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="floydd.cluster")
    cluster = make_cluster(COMPACTED)
    nodes = await cluster.start(3)
    await _people_act(nodes[0], 12)                              # past a snapshot on every box
    lead = await cluster.wait_leader()
    for node, how in ((next(n for n in nodes if n is not lead), cluster.kill), (lead, cluster.stop)):
        await how(node)
        await _people_act((await cluster.wait_leader()), 2, who="bob")
        node = await _restarted(cluster, node)
        await cluster.wait_for(lambda: (leader := cluster.leader()) is not None and _chain(node) == _chain(leader),
                               timeout=20,
                               what="the restarted box to hold the leader's chain")
        assert node.service.audit_guard.found is None and node.service.audit_guard.warnings() == []
    # a box that got the chain with the leader's snapshot (and its head record with it)
    lead = await cluster.wait_leader()
    new = await cluster.join(via=lead)
    await cluster.wait_for(lambda: _chain(new) and _chain(new) == _chain(lead), timeout=20,
                           what="the new box to hold the chain")
    assert new.driver.status().snapshot_index > _chain(new)[0]["index"]      # it came with the snapshot
    await cluster.kill(new)
    db = sqlite3.connect(_db(new))
    newest = _chain(new)[-1]
    assert db.execute("SELECT idx, seq, hash FROM audit_head").fetchall() == [(newest["index"], newest["seq"],
                                                                               newest["hash"])]
    db.close()
    new = await _restarted(cluster, new)
    assert new.service.audit_guard.found is None
    assert "AUDIT CHAIN" not in caplog.text


async def test_heartbeats_carry_each_box_s_head_and_a_box_with_another_chain_is_flagged(make_cluster, caplog):
    caplog.set_level(logging.WARNING, logger="floydd.cluster")
    cluster = make_cluster(REPLAYED)
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    await _people_act(lead, 2)
    other, third = [n for n in nodes if n is not lead]

    def said(node) -> str | None:
        return (lead.service.state.nodes.get(node.id) or {}).get("audit_head")
    await cluster.wait_for(lambda: all(said(n) and said(n)["seq"] == len(_chain(lead)) for n in nodes),
                           what="every box's heartbeat to carry the head")
    assert all(m["audit_head"] and m["audit_differs"] is None for m in lead.service.members())

    # a box behind says an older head: the same entry at that seq, not a difference
    older = _chain(lead)[2]
    await other.service._propose({"op": "node.health", "id": other.id, "status": "up",
                                  "audit_head": Head.of(older).wire()})
    await cluster.wait_for(lambda: said(other) == Head.of(older).wire(), what="the older head applied")
    assert lead.service.audit_guard.view(other.id) == {"audit_head": f"{older['seq']}:{older['hash']}",
                                                       "audit_differs": None}

    # the third box's newest stored entry rewritten on disk while it runs: its next heartbeat says so
    newest = _chain(third)[-1]
    _write(third, _rehashed(_chain(third), len(_chain(third)) - 1, who="mallory"))
    third.service.beat_soon()
    await cluster.wait_for(lambda: lead.service.audit_guard.view(third.id)["audit_differs"], what="the leader to flag it")
    differs = lead.service.audit_guard.view(third.id)["audit_differs"]
    assert differs.startswith(f"its entry {newest['seq']} has hash ") and newest["hash"][:12] in differs
    member = next(m for m in lead.service.members() if m["id"] == third.id)
    assert member["audit_differs"] == differs
    assert any(w.startswith(f"{third.service.name}'s audit chain differs from this box's: ")
               for w in lead.service.audit_guard.warnings())
    flagged = [r.getMessage() for r in caplog.records if "AUDIT CHAIN DIFFERS" in r.getMessage()]
    assert len(flagged) == 1 and third.id in flagged[0] and lead.id in flagged[0]
    assert lead.service.audit_guard.view(other.id)["audit_differs"] is None

    # the box's copy put back: the flag goes with its next heartbeat
    _write(third, [newest])
    third.service.beat_soon()
    await cluster.wait_for(lambda: lead.service.audit_guard.view(third.id)["audit_differs"] is None,
                           what="the flag to go")
    assert "audit chain agrees with the leader's again" in caplog.text


async def test_a_box_reports_only_its_own_head_and_its_own_chain(make_cluster):
    """Not even the leader, which may report another box's health (suspect), says its head;
    and no box reports another's chain as edited."""
    cluster = make_cluster(REPLAYED)
    nodes = await cluster.start(2)
    lead = await cluster.wait_leader()
    other = next(n for n in nodes if n is not lead)
    with pytest.raises(Forbidden, match="may not say n.'s audit chain head"):
        await lead.driver.propose({"op": "node.health", "id": other.id, "status": "up", "ts": 1.0, "v": 3,
                                   "audit_head": {"seq": 1, "hash": "a" * 64}}, fenced=True)
    with pytest.raises(Forbidden, match="may not report n.'s audit chain as edited"):
        await other.service._propose({"op": "audit.tamper", "box": lead.id, "first_seq": 1, "what": "forged"})
    assert not any(e["op"] == "audit.tamper" for e in _chain(lead))
