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
