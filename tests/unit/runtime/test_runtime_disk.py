"""The state folder's disk: when it counts as full, and the reserve released and made again."""

from __future__ import annotations

import errno
import os
import sqlite3
from types import SimpleNamespace

import pytest

from floydd.errors import StoreError, StoreFull
from floydd.runtime import disk as disk_mod
from floydd.runtime.disk import RESERVE_MAX, RESERVE_MIN, Disk, no_space, reserve_size

MIB = 1024 * 1024


class FakeDisk:
    """statvfs of a 100 MiB disk whose free space the test sets (the reserve file counts)."""

    def __init__(self, disk: Disk, free: int) -> None:
        self.disk, self.free = disk, free

    def statvfs(self, path):
        held = self.disk.reserve_path.stat().st_size if self.disk.reserve_path.exists() else 0
        return SimpleNamespace(f_frsize=1, f_blocks=100 * MIB, f_bavail=max(0, self.free - held))


@pytest.fixture
def fake(tmp_path, monkeypatch):
    d = Disk(tmp_path)
    f = FakeDisk(d, free=50 * MIB)
    monkeypatch.setattr(disk_mod.os, "statvfs", f.statvfs)
    return f


def test_the_reserve_is_a_share_of_the_disk_within_bounds():
    assert reserve_size(10 * MIB) == RESERVE_MIN
    assert reserve_size(100 * MIB) == 2 * MIB
    assert reserve_size(10**13) == RESERVE_MAX


def test_with_room_the_reserve_is_made_once(fake):
    assert fake.disk.check() is False
    assert fake.disk.reserve_path.stat().st_size == 2 * MIB
    assert fake.disk.check() is False and fake.disk.reserve_path.stat().st_size == 2 * MIB


def test_a_full_disk_releases_the_reserve_and_stays_full_until_there_is_room_again(fake):
    fake.disk.check()
    fake.free = 2 * MIB + MIB // 2           # the reserve held, half a MiB left for the rest: full
    assert fake.disk.check() is True and not fake.disk.reserve_path.exists()
    fake.free = 5 * MIB                      # some room, not enough to hold the reserve again with margin
    assert fake.disk.check() is True and not fake.disk.reserve_path.exists()
    fake.free = 6 * MIB                      # three reserves free: room again, reserve made again
    assert fake.disk.check() is False and fake.disk.reserve_path.stat().st_size == 2 * MIB


def test_the_reason_names_the_path():
    assert Disk("/s").why() == "disk full at /s" and Disk("/s").why("/s/records.db") == "disk full at /s/records.db"


@pytest.mark.parametrize("exc, full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (StoreFull("no space"), True),
    (OSError(errno.EACCES, "denied"), False),
    (StoreError("broken"), False),
    (ValueError("x"), False),
])
def test_no_space_tells_a_full_disk_from_other_failures(exc, full):
    assert no_space(exc) is full


def test_no_space_knows_sqlites_disk_full_also_as_a_cause(tmp_path):
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("PRAGMA max_page_count = 2")  # a database that cannot grow: SQLITE_FULL
    with pytest.raises(sqlite3.OperationalError) as err:
        conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(2000),)] * 10)
    assert no_space(err.value)
    try:
        raise RuntimeError("while recording") from err.value
    except RuntimeError as wrapped:
        assert no_space(wrapped)


def test_a_reserve_that_cannot_be_allocated_is_tried_again_only_after_the_disk_was_full(fake, monkeypatch):
    calls = []

    def unsupported(fd, offset, size):
        calls.append(size)
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(disk_mod.os, "posix_fallocate", unsupported)
    assert fake.disk.check() is False and fake.disk.check() is False
    assert calls == [2 * MIB] and not fake.disk.reserve_path.exists()   # no file left, no retry every second
    fake.free = 0
    fake.disk.check()
    fake.free = 50 * MIB
    fake.disk.check()
    assert len(calls) == 2


# -- the store watch: what a heartbeat says of the store (issue 21) -----------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def watch(tmp_path, monkeypatch):
    room = SimpleNamespace(free=50 * MIB)
    monkeypatch.setattr(disk_mod.os, "statvfs",
                        lambda path: SimpleNamespace(f_frsize=1, f_blocks=100 * MIB, f_bavail=room.free))
    clock = Clock()
    w = disk_mod.StoreWatch([tmp_path / "store", tmp_path], clock=clock, recheck_after=600.0)
    w.room, w.clock = room, clock
    assert w.poll() is True and w.report()["state"] == "ok"
    return w


def test_a_full_disk_is_reported_and_room_again_with_the_reserves_margin(watch):
    watch.room.free = 512 * 1024                       # under half of the 2 MiB reserve
    assert watch.poll() is True
    said = watch.report()
    assert said["state"] == "full" and said["free"] == 512 * 1024 and "disk full at" in said["why"]
    watch.room.free = 4 * MIB                          # not yet 3 reserves
    assert watch.poll() is False and watch.report()["state"] == "full"
    watch.room.free = 7 * MIB
    assert watch.poll() is True and watch.report() == {"state": "ok", "why": "", "free": 7 * MIB,
                                                       "total": 100 * MIB}


def test_a_copy_that_failed_for_space_keeps_the_box_out_until_space_came_back(watch):
    watch.room.free = 10 * MIB                         # not full by the reserve's measure: the copy was bigger
    assert watch.failed(StoreFull("no space left on the device of /s while writing object ab")) is True
    watch.poll()
    said = watch.report()
    assert said["state"] == "full" and "no space left for new data" in said["why"] and "object ab" in said["why"]
    watch.room.free = 20 * MIB                         # a little freed: not enough
    assert watch.poll() is False and watch.report()["state"] == "full"
    watch.room.free = 30 * MIB                         # 2 x 10 MiB + the reserve
    assert watch.poll() is True and watch.report()["state"] == "ok"


def test_a_space_failure_is_forgotten_after_the_recheck_time(watch):
    watch.failed(OSError(errno.ENOSPC, "No space left on device"))
    watch.poll()
    assert watch.report()["state"] == "full"
    watch.clock.now += 599
    assert watch.poll() is False
    watch.clock.now += 2
    assert watch.poll() is True and watch.report()["state"] == "ok"


def test_a_failing_store_until_a_write_works_and_what_is_not_its_fault(watch):
    from floydd.errors import IntegrityError, NotFound, Unavailable
    for peer_fault in (Unavailable("no node could send tree ab"), IntegrityError("node b sent bad bytes"),
                       NotFound("gone"), OSError(errno.ECONNRESET, "reset")):
        assert watch.failed(peer_fault) is False
    assert watch.poll() is False and watch.report()["state"] == "ok"
    assert watch.failed(StoreError("the store /s is being re-sealed under a new secret")) is False   # passing
    written = StoreError("could not write object ab to /s: Input/output error")
    written.__cause__ = OSError(errno.EIO, "Input/output error")
    assert watch.failed(written) is True
    watch.poll()
    assert watch.report()["state"] == "failing" and "Input/output error" in watch.report()["why"]
    watch.succeeded()
    assert watch.poll() is True and watch.report()["state"] == "ok"
    wrapped = StoreError("copy failed")
    wrapped.__cause__ = OSError(errno.EROFS, "Read-only file system")
    assert disk_mod.store_fault(wrapped) == "copy failed"
    assert disk_mod.store_fault(OSError(errno.EIO, "Input/output error")) == "Input/output error"
    assert disk_mod.store_fault(ValueError("x")) == ""
    catalog = StoreError("the dataset catalog failed: disk I/O error")
    catalog.__cause__ = sqlite3.OperationalError("disk I/O error")
    catalog.__cause__.sqlite_errorcode = sqlite3.SQLITE_IOERR_WRITE
    assert disk_mod.store_fault(catalog) == "the dataset catalog failed: disk I/O error"
    locked = StoreError("the dataset catalog failed: database is locked")
    locked.__cause__ = sqlite3.OperationalError("database is locked")
    locked.__cause__.sqlite_errorcode = sqlite3.SQLITE_BUSY
    assert disk_mod.store_fault(locked) == ""


def test_a_disk_whose_reserve_the_runtime_released_counts_that_much_fuller(tmp_path, monkeypatch):
    room = SimpleNamespace(free=3 * MIB)
    monkeypatch.setattr(disk_mod.os, "statvfs",
                        lambda path: SimpleNamespace(f_frsize=1, f_blocks=100 * MIB, f_bavail=room.free))
    reserve = tmp_path / disk_mod.RESERVE_NAME
    reserve.write_bytes(b"r")
    w = disk_mod.StoreWatch([tmp_path], reserve=reserve)
    w.poll()
    assert w.report()["state"] == "ok"            # 3 MiB free beside a 2 MiB reserve: not full
    reserve.unlink()                              # the runtime found the disk full and released it
    room.free = 2 * MIB + 512 * 1024              # what is free now counts the released reserve
    assert w.poll() is True and w.report()["state"] == "full"
