"""``job.archive`` and the archive, in the pure state machine (a MemoryArchive)."""

from __future__ import annotations

import asyncio
import random

import pytest

from floydd.cluster.state import commands
from floydd.cluster.state.archive import MemoryArchive, archived_form, decode_chunk
from floydd.cluster.archiver import choose
from floydd.cluster.state.machine import ClusterState
from floydd.errors import Conflict, InvalidSpec, NotFound
from floydd.model import Job


def node():
    return {"op": "node.upsert", "id": "n1", "name": "box", "address": "10.0.0.1", "cluster_port": 1,
            "resources": {"gpus": [0, 1]}, "ts": 1.0}


def submit(key, ts=2.0, **kw):
    return {"op": "job.submit", "idem_key": key, "project": "p", "spec": {"command": "x", "resources": {"gpus": 0}},
            "origin": "n1", "ts": ts, **kw}


def stop(job, ts=3.0):
    return {"op": "job.update", "job": job, "state": "stopped", "reason": "user", "ts": ts}


def archive(*jobs, ts=4.0):
    return {"op": "job.archive", "jobs": list(jobs), "ts": ts}


class Log:
    def __init__(self, state=None):
        self.state, self.index, self.entries = state or ClusterState(), 0, []

    def __call__(self, cmd):
        self.index += 1
        self.entries.append(cmd)
        try:
            return self.state.apply(cmd, index=self.index, term=1)
        except (Conflict, NotFound, InvalidSpec) as exc:
            return exc


def test_only_finished_jobs_move_and_their_keys_and_numbers_stay_answerable():
    log = Log()
    log(node())
    for i in range(4):
        log(submit(f"k{i}"))
    log(stop("p/1"))
    log(stop("p/2"))
    assert log(archive("p/1", "p/3", "p/9")) == {"archived": ["p/1"]}      # p/3 queued, p/9 unknown
    st = log.state
    assert set(st.jobs) == {"p/2", "p/3", "p/4"} and st.archive.count() == 1
    assert "k0" not in st.idem and st.job("p/1").state == "stopped" and "history" not in st.stored_job("p/1")
    assert log(submit("k0"))["id"] == "p/1"                      # a retry: the same job, not a second one
    assert log(submit("new"))["id"] == "p/5"                     # numbers never reused
    assert isinstance(log(submit("other", number=1)), Conflict)  # nor taken by an adopted job
    assert isinstance(log({"op": "dataset.add_version", "name": "d", "tree": "ab" * 16, "idem_key": "k0",
                           "ts": 5.0}), Conflict)
    assert isinstance(log({**stop("p/1"), "state": "failed"}), NotFound)   # archived jobs do not change
    assert log({"op": "job.delete", "job": "p/1", "ts": 6.0}) is None
    assert st.archive.count() == 0 and isinstance(log({"op": "job.delete", "job": "p/1", "ts": 6.0}), NotFound)
    assert log(submit("k0"))["id"] == "p/6"                      # deleted: the key is free again


def test_a_replay_over_an_archive_that_is_ahead_makes_the_same_state():
    """A node restarts (or installs a snapshot) with an archive that already holds what later
    entries archive: replaying from an older state must end where the first run ended, and
    answer every command the same way."""
    rng = random.Random(7)
    first = Log()
    results, snapshots = [_outcome(first(node()))], {}
    for step in range(300):
        if step in (100, 200):
            snapshots[first.index] = first.state.snapshot()
        roll = rng.random()
        if roll < 0.45:
            cmd = submit(f"k{rng.randrange(60)}", ts=float(step))
        elif roll < 0.75:
            cmd = stop(f"p/{rng.randrange(1, 40)}", ts=float(step))
        elif roll < 0.9:
            cmd = archive(*{f"p/{rng.randrange(1, 40)}" for _ in range(5)}, ts=float(step))
        else:
            cmd = {"op": "job.delete", "job": f"p/{rng.randrange(1, 40)}", "ts": float(step)}
        results.append(_outcome(first(cmd)))
    assert first.state.archive.count() > 5, "the log archives something"
    snapshots[0] = b""
    for at, data in snapshots.items():
        ahead = _copy(first.state.archive)               # the archive of the end: ahead of the snapshot,
        asyncio.run(ahead.purge(at, run=None))           # less the tombstones that snapshot made useless
        replay = Log(ClusterState(ahead))
        replay.state.restore(data)
        replay.index = at
        again = [_outcome(replay(cmd)) for cmd in first.entries[at:]]
        assert again == results[at:], f"the same answers replaying from entry {at}"
        assert replay.state.snapshot() == first.state.snapshot()
        assert replay.state.archive.count() == first.state.archive.count()


def _copy(archive: MemoryArchive) -> MemoryArchive:
    out = MemoryArchive()
    for row in archive._rows.values():
        out.put(row)
    return out


def _outcome(result):
    return type(result).__name__ if isinstance(result, Exception) else result


def test_the_command_is_bounded_and_checked():
    commands.check(archive("p/1"))
    with pytest.raises(InvalidSpec):
        commands.check(archive(*[f"p/{i}" for i in range(commands.MAX_ARCHIVE + 1)]))
    with pytest.raises(InvalidSpec):
        commands.check({"op": "job.archive", "jobs": [1], "ts": 1.0})


def _job(n, state="success", ended=100.0, parts=(), data=()):
    return Job.from_dict({"id": f"p/{n}", "project": "p", "number": n, "state": state, "created": float(n),
                          "updated": float(n), "ended": ended, "spec": {"data": list(data)},
                          "parts": [{"rank": r, "node": "n1", "gpus": [], "state": s} for r, s in enumerate(parts)]})


def test_choose_takes_the_oldest_finished_past_the_count_or_the_age():
    jobs = [_job(n, ended=100.0 + n) for n in range(1, 11)]
    assert choose(jobs, now=0, keep=7, after=1e9, batch=100) == ["p/1", "p/2", "p/3"]
    assert choose(jobs, now=105.5, keep=100, after=0, batch=100) == ["p/1", "p/2", "p/3", "p/4", "p/5"]
    assert choose(jobs, now=0, keep=0, after=1e9, batch=4) == ["p/1", "p/2", "p/3", "p/4"]
    live = [_job(1), _job(2, parts=("success", "running")), _job(3, state="running", ended=None),
            _job(4, state="queued", ended=None, data=[{"ref": "p/1/output:1", "mount": "/input"}]), _job(5)]
    assert choose(live, now=1e6, keep=0, after=0, batch=100) == ["p/5"]   # used, gang part running, live


def test_an_archive_travels_as_chunks_and_a_bad_chunk_is_refused():
    src, dst = MemoryArchive(), MemoryArchive()
    for n in range(1, 1200):
        src.put(archived_form(Job.from_dict({"id": f"p/{n}", "project": "p", "number": n, "created": float(n),
                                             "updated": float(n), "state": "success", "idem_key": f"k{n}"}), n))

    async def ship():
        sink = dst.receive(5, 2, run=None)
        async for chunk in src.export(rows=500):
            await sink.add(chunk)
        await sink.finish()
    asyncio.run(ship())
    assert dst.count() == 0                 # staged until the snapshot is installed
    dst.installed(5, 2)
    assert dst.count() == 1199 and dst.by_idem("k7").id == "p/7"
    assert [j.id for j in asyncio.run(dst.page(limit=2))] == ["p/1199", "p/1198"]
    with pytest.raises(InvalidSpec):
        decode_chunk(b"\x91\x97\xa3p/1\xa1p\x02\x00\xa7success\xc0\xc4\x01\x80")
