"""Finished jobs leave the hot state for the archive, and a node that joins later gets it too.

Real raft drivers over mTLS, SQLite logs: the leader's archiver moves finished jobs out of
the in-memory state; every node lists them from its archive table; the log is compacted past
the ``job.archive`` entries, so a node that joins afterwards can only learn them from the
snapshot stream, which carries the archive beside the state.
"""

from __future__ import annotations

import sqlite3

from floydd.cluster.state.archive import Row, archived_form
from floydd.cluster.tables.archive_db import SqliteArchive
from floydd.cluster.archiver import Archiver
from floydd.cluster.raft import ConfState, Snapshot
from floydd.cluster.raft.sqlite_storage import SqliteStorage
from floydd.model import Job
from tests.harness.cluster import fast

SPEC = {"project": "m", "command": "true"}
CONFIG = fast(snapshot_every=50, archive_keep=5, archive_after=1e9, archive_batch=7, archive_interval=0.05)


async def _finished_jobs(node, n: int, first: int = 0) -> list[str]:
    keys = []
    for i in range(first, first + n):
        job = await node.service.submit_job(SPEC, f"k{i}")
        await node.service.update_job(job["id"], state="stopped", reason="test")
        keys.append(job["id"])
    return keys


def _table_rows(node) -> int:
    db = sqlite3.connect(node.service.state_dir / "raft.db")
    try:
        return db.execute("SELECT count(*) FROM archive").fetchone()[0]
    finally:
        db.close()


async def test_finished_jobs_are_archived_everywhere_and_a_late_node_gets_them(make_cluster):
    cluster = make_cluster(CONFIG)
    nodes = await cluster.start(3)
    keys = await _finished_jobs(nodes[0], 40)
    running = await nodes[1].service.submit_job(SPEC, "live")           # queued: never archived
    lead = await cluster.wait_leader()
    hot = set(keys[-5:]) | {running["id"]}      # 6 hot jobs can also be m/35..40 before the live one is applied
    await cluster.wait_for(lambda: all(set(n.service.state.jobs) == hot for n in nodes), timeout=20,
                           what="every node to keep 5 finished jobs and the live one hot")
    for n in nodes:
        assert n.service.state.archive.count() == 35
        assert not any(i[0] == "job" and i[1] in keys[:35] for i in n.service.state.idem.values())
    # still readable, still numbered, and a retried submission finds its archived job
    old = await nodes[2].service.job(keys[0])
    assert old.state == "stopped" and old.history == () and old.archived_at
    again = await nodes[2].service.submit_job(SPEC, "k0")
    assert again["id"] == keys[0]
    assert (await nodes[2].service.submit_job(SPEC, "fresh"))["id"] == "m/42"
    listed = await nodes[1].service.state.archive.page(project="m", limit=3)
    assert [j.id for j in listed] == [keys[34], keys[33], keys[32]]

    # enough entries to compact the log past the archive commands, then a fourth node joins
    archived_at = lead.driver.status().applied
    for i in range(80):
        await lead.service.leader_update_job(running["id"], reason=f"still waiting {i}")
    await cluster.wait_for(lambda: lead.driver.status().snapshot_index >= archived_at,
                           what="the leader's log compacted past the archive commands")
    new = await cluster.join(via=nodes[1])
    await cluster.wait_for(lambda: new.service.state.archive.count() == 35
                           and len(new.service.state.jobs) == len(lead.service.state.jobs),
                           timeout=20, what="the new node to hold the archive and the hot state")
    assert _table_rows(new) == 35
    assert (await new.service.job(keys[3])).id == keys[3]
    assert (await new.service.submit_job(SPEC, "k7"))["id"] == keys[7]
    # a deleted archived job goes from every archive; its number is never used again
    await new.service.delete_job(keys[1])
    await cluster.wait_for(lambda: all(n.service.state.archive.count() == 34 for n in nodes + [new]),
                           what="the archived job deleted everywhere")
    assert (await lead.service.submit_job(SPEC, "after-delete"))["id"] == "m/43"


async def test_the_archive_survives_a_restart_and_replays_idempotently(make_cluster):
    cluster = make_cluster(CONFIG)
    (node,) = await cluster.start(1)
    keys = await _finished_jobs(node, 12)
    await cluster.wait_for(lambda: node.service.state.archive.count() == 7, what="7 archived")
    await cluster.kill(node)                 # no clean stop: the log is replayed on restart
    node = await cluster.restart(node)
    await cluster.wait_leader()
    await cluster.wait_for(lambda: len(node.service.state.jobs) == 5, what="the hot state replayed")
    assert node.service.state.archive.count() == 7 and _table_rows(node) == 7
    assert sorted(node.service.state.jobs) == sorted(keys[-5:])
    assert (await node.service.job(keys[0])).state == "stopped"


async def test_the_archiver_picks_the_oldest_finished_jobs_and_skips_what_is_live(make_cluster):
    cluster = make_cluster(fast(archive_keep=1000, archive_after=1e9, archive_interval=3600))
    (node,) = await cluster.start(1)
    await _finished_jobs(node, 3)
    service = node.service
    archiver = Archiver(node_id=service.node_id, config=service.config, state=service.state, driver=service.driver)
    assert await archiver.archive_once() == 0               # young, and few
    node.service.config = archiver.config = fast(archive_keep=1, archive_after=1e9, archive_batch=500)
    assert await archiver.archive_once() == 2
    assert sorted(node.service.state.jobs) == ["m/3"]


async def _direct(fn, *args):
    return fn(*args)


def _archived(n: int, index: int) -> Row:
    return archived_form(Job.from_dict({"id": f"p/{n}", "project": "p", "number": n, "created": float(n),
                                        "updated": float(n), "state": "success", "idem_key": f"k{n}",
                                        "history": [[1.0, "x"]]}), index)


async def test_a_received_archive_is_swapped_in_only_whole_and_with_its_snapshot(tmp_path):
    path = tmp_path / "raft.db"
    leader, node = SqliteArchive(tmp_path / "leader.db"), SqliteArchive(path)
    for n in range(1, 1101):
        leader.put(_archived(n, n))
    leader.drop("p/7", 2000)                              # a tombstone travels too
    await leader.flush(_direct)
    storage = SqliteStorage(path, on_snapshot=node.saved)
    node.put(_archived(5000, 1))
    await node.flush(_direct)
    conf = ConfState(voters=frozenset({"a"}))

    async def ship(index: int, finish: bool) -> None:
        sink = node.receive(index, 1, _direct)
        async for chunk in leader.export():
            await sink.add(chunk)
        if finish:
            await sink.finish()
    await ship(10, finish=False)                          # a stream cut short: never swapped in
    storage.save(None, (), Snapshot(index=10, term=1, conf=conf, data=b""))
    assert node.count() == 1
    await ship(11, finish=True)
    storage.save(None, (), Snapshot(index=12, term=1, conf=conf, data=b""))   # another snapshot: not its archive
    assert node.count() == 1
    await ship(13, finish=True)
    storage.save(None, (), Snapshot(index=13, term=1, conf=conf, data=b""))
    node.installed(13, 1)
    assert node.count() == 1099 and node.get("p/5000") is None and node.get("p/7") is None
    assert node.get("p/7", before=1500).id == "p/7"     # deleted later than a replay from 1500 sees
    assert [j.id for j in await node.page(limit=2)] == ["p/1100", "p/1099"]
    assert node.by_idem("k12").id == "p/12" and node.get("p/12").history == ()
    assert "history" not in node.get("p/12").to_dict()
    await node.purge(2000, _direct)
    assert node.get("p/7", before=1500) is None           # purged with the snapshot past its deletion
    node.put(_archived(6000, 3000))                       # pending rows are read before they are written
    node.drop("p/1", 3001)
    assert node.count() == 1099 and node.by_idem("k6000").id == "p/6000"
    assert [j.id for j in await node.page(project="p", limit=1)] == ["p/6000"]
    storage.close()
    for archive in (leader, node):
        archive.close()


def test_the_count_stays_whole_while_the_writer_commits_the_pending_rows(tmp_path):
    """The writer thread commits pending rows while the loop counts: the rows are counted once,
    in the table or as pending, never by neither (the count was once two reads, 34 of 35)."""
    archive = SqliteArchive(tmp_path / "raft.db")
    for n in range(1, 4):
        archive.put(_archived(n, n))
    assert archive.count() == 3
    pending = list(archive._pending.values())
    fired = []

    def commit_meanwhile() -> int:                        # runs between the count's VM steps
        if not fired:
            fired.append(True)
            archive._write(pending)                       # the writer's connection commits them
        return 0
    archive.table.loop().set_progress_handler(commit_meanwhile, 1)
    try:
        assert archive.count() == 3
    finally:
        archive.table.loop().set_progress_handler(None, 1)
    assert fired and archive.count() == 3
