"""The writer of a handed export file (:class:`floydd.api.handedio.FileOut`): records framed in
its own buffers are written in order and the buffers reused, progress counts what is in the
file, writeback is started as it goes, and a failed write stops the export without a hang."""

from __future__ import annotations

import os

import pytest

from floydd.api import handedio
from floydd.api.handedio import BUFFERS, FileOut


def _record(out: FileOut, n: int, fill: int) -> memoryview:
    view = memoryview(out.buffer(n))[:n]
    view[:] = bytes([fill]) * n
    return view


def test_records_are_written_in_order_through_a_few_reused_buffers(tmp_path, monkeypatch):
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(handedio, "WRITEBACK", 1 << 20)
    monkeypatch.setattr(handedio, "start_writeback", lambda fd, offset, length: started.append((offset, length)))
    reports: list[tuple[int, int]] = []
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    out = FileOut(fd, lambda done: reports.append((done, os.fstat(fd).st_size)))
    buffers, expected = set(), bytearray()
    try:
        for i in range(4 * BUFFERS):
            out.write(b"head %d|" % i)                      # small writes gathered between records
            record = _record(out, 300_000 + i, i)
            buffers.add(id(record.obj))
            out.write(record)
            expected += b"head %d|" % i + bytes([i]) * (300_000 + i)
        out.close(sync=True)
    finally:
        os.close(fd)
    assert path.read_bytes() == expected
    assert out.position == out.written == len(expected)
    assert len(buffers) <= BUFFERS                          # reused once written, not one a record
    assert all(done <= size for done, size in reports)     # bytes in the file, not queued
    assert [d for d, _ in reports] == sorted(d for d, _ in reports)
    assert started and started[0][0] == 0                   # writeback from the start, stretch after stretch
    assert all(a + n == b for (a, n), (b, _) in zip(started, started[1:]))
    assert all(n >= 1 << 20 for _, n in started)


def test_a_failed_write_is_raised_and_the_export_does_not_wait_for_buffers(tmp_path):
    path = tmp_path / "out"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)                         # every write fails (EBADF)
    out = FileOut(fd, lambda done: None)
    try:
        with pytest.raises(OSError):
            for i in range(4 * BUFFERS):                    # more records than buffers: none is lost
                out.write(_record(out, 1 << 20, i))
        with pytest.raises(OSError):
            out.close(sync=True)
    finally:
        os.close(fd)
    assert path.read_bytes() == b""


def test_the_client_going_away_stops_the_writing_at_the_next_record(tmp_path):
    class Gone(Exception):
        pass

    def progress(done: int) -> None:
        if done:
            raise Gone

    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    out = FileOut(fd, progress)
    try:
        with pytest.raises(Gone):
            for i in range(100):
                out.write(_record(out, 1 << 20, i))
        out.close(sync=False)
    finally:
        os.close(fd)
    assert out.written <= (BUFFERS + 2) << 20              # what was queued, not the 100 records
