"""One conformance suite, run against every backend (STYLE 13)."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from floydd.errors import IntegrityError, NotFound, StoreError, StoreFull
from floydd.store import Backend, LocalBackend, MemoryBackend, ObjectId, local, publish
from floydd.store.keys.crypto import Keys
from store_testlib import wait_until_set

KEYS = Keys(b"k" * 32)


def _obj(text: bytes) -> tuple[ObjectId, bytes]:
    oid = KEYS.object_id(text)
    return oid, KEYS.seal(oid, text)


def _check(oid: ObjectId):
    return lambda stored: KEYS.open(oid, stored)


@pytest.fixture(params=["local-batch", "local-object", "local-object-direct", "memory"])
def backend(request, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    return LocalBackend(tmp_path / "objects", sync=request.param.split("-")[1], direct=request.param.endswith("direct"))


def _save(backend: Backend, *objs: tuple[ObjectId, bytes]) -> None:
    with backend.batch() as batch:
        for oid, data in objs:
            batch.save(oid, data, _check(oid))
        batch.commit()


def test_satisfies_the_protocol(backend):
    assert isinstance(backend, Backend)
    assert isinstance(backend.batch(), __import__("floydd.store", fromlist=["Batch"]).Batch)
    assert backend.description


def test_save_load_has_stat_list_remove(backend):
    a, b = _obj(b"alpha"), _obj(b"beta" * 1000)
    assert not backend.has(a[0])
    _save(backend, a, b)
    assert backend.has(a[0]) and backend.has(b[0])
    assert backend.load(a[0]) == a[1]
    assert backend.load(b[0], bypass_cache=True) == b[1]
    assert backend.stat(b[0]) == len(b[1])
    assert sorted(backend.list()) == sorted([a[0], b[0]])
    backend.remove(a[0])
    assert not backend.has(a[0])
    assert list(backend.list()) == [b[0]]
    backend.remove(a[0])  # removing a missing object is a no-op


def test_list_by_prefix_yields_one_slice_of_the_ids(backend):
    objs = [_obj(f"object {i}".encode()) for i in range(40)]
    _save(backend, *objs)
    ids = sorted(o for o, _ in objs)
    for prefix in {oid.hex[:2] for oid in ids} | {oid.hex[:1] for oid in ids} | {""}:
        assert sorted(backend.list(prefix)) == [oid for oid in ids if oid.hex.startswith(prefix)]


def test_missing_object_is_not_found(backend):
    oid, _ = _obj(b"nope")
    with pytest.raises(NotFound) as e:
        backend.load(oid)
    assert oid.short in e.value.message
    with pytest.raises(NotFound):
        backend.stat(oid)


def test_abort_leaves_nothing_half_written(backend):
    a = _obj(b"aborted")
    with backend.batch() as batch:
        batch.save(*a, _check(a[0]))
    # never committed: invisible, or (a backend that publishes early) complete and valid
    for oid in backend.list():
        assert KEYS.open(oid, backend.load(oid)) == b"aborted"
    assert backend.clean_temp() == 0
    if not isinstance(backend, LocalBackend) or backend.sync == "batch":
        assert list(backend.list()) == []


def test_check_sees_the_stored_bytes_and_can_refuse(backend):
    a = _obj(b"checked")
    seen = []
    with backend.batch() as batch:
        batch.save(a[0], a[1], seen.append)
        batch.commit()
    assert seen == [a[1]]

    b = _obj(b"refused")

    def refuse(stored: bytes) -> None:
        raise IntegrityError("refused on purpose")

    with backend.batch() as batch:
        with pytest.raises(IntegrityError):
            batch.save(b[0], b[1], refuse)
        batch.commit()
    assert not backend.has(b[0])
    assert backend.clean_temp() == 0  # the refused temp file was removed at once


def test_write_once_same_id_twice(backend):
    a = _obj(b"twice")
    _save(backend, a)
    again = (a[0], KEYS.seal(a[0], b"twice"))  # same content, another nonce
    _save(backend, again)
    assert list(backend.list()) == [a[0]]
    assert KEYS.open(a[0], backend.load(a[0])) == b"twice"


def test_concurrent_saves_from_threads(backend):
    objs = [_obj(f"object {i}".encode() * 50) for i in range(64)]
    with backend.batch() as batch:
        threads = [threading.Thread(target=lambda part=objs[i::4]: [batch.save(o, d, _check(o)) for o, d in part])
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batch.commit()
    assert sorted(backend.list()) == sorted(o for o, _ in objs)


def test_list_skips_temp_files_and_clean_temp_removes_them(tmp_path: Path):
    backend = LocalBackend(tmp_path / "objects")
    a = _obj(b"real")
    _save(backend, a)
    leftover = backend.path(a[0]).with_name(".tmp-" + "ab" * 32 + "-dead")
    leftover.write_bytes(b"half")
    (backend.root / "00" / "not-an-id").write_bytes(b"x")
    assert list(backend.list()) == [a[0]]
    assert backend.clean_temp() == 1
    assert not leftover.exists()


def test_objects_fan_out_by_prefix(tmp_path: Path):
    backend = LocalBackend(tmp_path / "objects")
    a = _obj(b"fan")
    _save(backend, a)
    assert backend.path(a[0]) == tmp_path / "objects" / a[0].hex[:2] / a[0].hex
    assert backend.path(a[0]).is_file()


def test_batch_mode_publishes_only_at_commit(tmp_path: Path):
    backend = LocalBackend(tmp_path / "objects", sync="batch")
    a = _obj(b"later")
    with backend.batch() as batch:
        batch.save(*a, _check(a[0]))
        assert not backend.has(a[0])
        batch.commit()
        assert backend.has(a[0])


@pytest.mark.parametrize("sync", ["batch", "object"])
def test_disk_full_is_store_full_and_leaves_nothing(tmp_path: Path, monkeypatch, sync):
    backend = LocalBackend(tmp_path / "objects", sync=sync)
    import floydd.store.local as local

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local.os, "write", full)
    a = _obj(b"x" * 10000)
    with pytest.raises(StoreFull) as e:
        _save(backend, a)
    assert "no space left" in e.value.message and e.value.hint
    monkeypatch.undo()
    assert list(backend.list()) == []
    assert backend.clean_temp() == 0
    assert not [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]


# -- object mode: fsync and rename on the batch's publishing thread -----------------------

def _publish_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("floydd-store-publish")]


def _failing_fsync(monkeypatch, err: int, fail_on: int) -> None:
    """fsync fails (``err``) on its ``fail_on``-th call on a regular file."""
    real, calls, lock = os.fsync, [], threading.Lock()

    def fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            with lock:                  # several publishers call it at once
                calls.append(fd)
                failing = len(calls) == fail_on
            if failing:
                raise OSError(err, os.strerror(err))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("err, kind", [(errno.EIO, StoreError), (errno.ENOSPC, StoreFull)])
def test_a_failed_fsync_names_nothing_after_it_and_commit_raises(tmp_path: Path, monkeypatch, err, kind):
    monkeypatch.setattr(publish, "_PUBLISHERS", 1)     # "after it": one publisher keeps the order
    backend = LocalBackend(tmp_path / "objects", sync="object")
    objs = [_obj(f"object {i}".encode() * 1000) for i in range(5)]
    _failing_fsync(monkeypatch, err, fail_on=2)
    with pytest.raises(kind) as e:
        with backend.batch() as batch:
            for oid, data in objs:
                batch.save(oid, data, _check(oid))  # may already raise: the publisher failed
            batch.commit()
    assert e.value.hint
    monkeypatch.undo()
    # the object before the failure was durable, so it is named; none from the failure on
    assert list(backend.list()) == [objs[0][0]]
    for oid in backend.list():
        assert KEYS.open(oid, backend.load(oid)) == b"object 0" * 1000
    assert backend.clean_temp() == 0  # every temp file was removed at once
    assert not _publish_threads()


@pytest.mark.parametrize("err, kind", [(errno.EIO, StoreError), (errno.ENOSPC, StoreFull)])
def test_with_several_publishers_a_failed_fsync_names_only_fsynced_objects_and_commit_raises(
        tmp_path: Path, monkeypatch, err, kind):
    backend = LocalBackend(tmp_path / "objects", sync="object")
    objs = [_obj(f"object {i}".encode() * 1000) for i in range(12)]
    _failing_fsync(monkeypatch, err, fail_on=2)
    with pytest.raises(kind):
        with backend.batch() as batch:
            for oid, data in objs:
                batch.save(oid, data, _check(oid))
            batch.commit()
    monkeypatch.undo()
    named = list(backend.list())
    assert len(named) < len(objs), "the object whose fsync failed is not named"
    for oid in named:                              # what was named was fsynced and is whole
        assert KEYS.open(oid, backend.load(oid)).startswith(b"object ")
    assert backend.clean_temp() == 0
    assert not _publish_threads()


def test_abort_drops_what_is_verified_but_not_yet_fsynced(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(publish, "_PUBLISHERS", 1)     # one in flight, three queued behind it
    backend = LocalBackend(tmp_path / "objects", sync="object")
    objs = [_obj(f"queued {i}".encode() * 1000) for i in range(4)]
    entered, real = threading.Event(), os.fsync
    batch = backend.batch()

    def slow_fsync(fd):  # the first object's fsync lasts until abort has begun
        publisher = batch._pub  # set before anything was queued; abort clears it
        entered.set()
        deadline = time.monotonic() + 30
        while not publisher._discard and time.monotonic() < deadline:
            time.sleep(0.001)
        return real(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    for oid, data in objs:
        batch.save(oid, data, _check(oid))
    wait_until_set(entered)
    batch.abort()  # the first object finishes its fsync and is named; the rest are dropped
    monkeypatch.undo()
    assert list(backend.list()) == [objs[0][0]]
    for oid in backend.list():
        assert KEYS.open(oid, backend.load(oid)) == b"queued 0" * 1000
    assert backend.clean_temp() == 0
    assert not _publish_threads()


def test_with_every_publisher_busy_abort_names_only_what_was_fsynced(tmp_path: Path, monkeypatch):
    n = publish._PUBLISHERS
    backend = LocalBackend(tmp_path / "objects", sync="object")
    objs = [_obj(f"many {i}".encode() * 1000) for i in range(n + 5)]
    entered, real, lock = threading.Semaphore(0), os.fsync, threading.Lock()
    batch = backend.batch()
    synced: list[int] = []

    def slow_fsync(fd):  # every publisher holds one object until abort has begun
        publisher = batch._pub
        entered.release()
        deadline = time.monotonic() + 30
        while not publisher._discard and time.monotonic() < deadline:
            time.sleep(0.001)
        real(fd)
        with lock:
            synced.append(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    for oid, data in objs:
        batch.save(oid, data, _check(oid))
    for _ in range(n):
        assert entered.acquire(timeout=30), "each publisher took an object"
    batch.abort()
    monkeypatch.undo()
    named = list(backend.list())
    assert len(named) == len(synced) == n, "the ones in flight were fsynced and named; the queued five dropped"
    for oid in named:
        assert KEYS.open(oid, backend.load(oid)).startswith(b"many ")
    assert backend.clean_temp() == 0
    assert not _publish_threads()


def test_commit_returns_only_once_every_object_is_named(tmp_path: Path):
    backend = LocalBackend(tmp_path / "objects", sync="object")
    objs = [_obj(f"named {i}".encode() * 3000) for i in range(40)]
    with backend.batch() as batch:
        for oid, data in objs:
            batch.save(oid, data, _check(oid))
        batch.commit()
        assert sorted(backend.list()) == sorted(o for o, _ in objs)  # before the batch ends
        assert not [p for p in (tmp_path / "objects").rglob(".tmp-*")]
    assert not _publish_threads()


@pytest.mark.parametrize("size", [5, 100_000, (2 << 20) + 7])
def test_check_stored_hands_the_stored_bytes_and_keeps_no_copy(backend, size):
    obj = _obj(os.urandom(size))
    _save(backend, obj)
    seen = []
    backend.check_stored(obj[0], lambda stored: seen.append(bytes(stored)))
    assert seen == [obj[1]]
    with pytest.raises(NotFound):
        backend.check_stored(_obj(b"never saved")[0], seen.append)
    with pytest.raises(ValueError, match="refused"):        # the check's verdict reaches the caller
        backend.check_stored(obj[0], lambda stored: (_ for _ in ()).throw(ValueError("refused")))
