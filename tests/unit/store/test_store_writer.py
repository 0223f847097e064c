"""The Writer seals on the caller's thread, straight from the caller's buffer."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from floydd.store import LocalBackend, MemoryBackend, Store
from floydd.store.keys.crypto import Keys
from floydd.store.objects import BUFFER_SIZE, Objects
from store_testlib import describe, write_tree


@pytest.fixture(params=["local", "local-direct", "memory"])
def objects(request, tmp_path: Path) -> Objects:
    backend = (MemoryBackend() if request.param == "memory"
               else LocalBackend(tmp_path / "objects", direct=request.param == "local-direct"))
    return Objects(backend, Keys(os.urandom(32)))


def test_the_caller_may_reuse_its_buffer_as_soon_as_put_returns(objects: Objects):
    buf = bytearray(random.Random(1).randbytes(3 << 20))
    original = bytes(buf)
    with objects.writer(workers=2) as w:
        oid = w.put(memoryview(buf))
        buf[:] = bytes(len(buf))  # what the chunker does with its read buffer
        w.commit()
    assert objects.get(oid) == original


def test_objects_larger_than_the_reused_buffers_are_stored_whole(objects: Objects):
    big = random.Random(2).randbytes(BUFFER_SIZE + 12345)  # a tree of a huge folder
    small = [random.Random(3 + i).randbytes(100_000) for i in range(20)]
    with objects.writer(workers=2) as w:
        ids = [w.put(s) for s in small[:10]] + [w.put(big)] + [w.put(s) for s in small[10:]]
        w.commit()
    assert [objects.get(i) for i in ids] == small[:10] + [big] + small[10:]


def test_many_objects_in_flight_then_nothing_left_running(objects: Objects):
    datas = [random.Random(10 + i).randbytes(random.Random(i).randint(1, 2 << 20)) for i in range(30)]
    before = set(threading.enumerate())
    with objects.writer(workers=3, checkpoint_bytes=8 << 20) as w:  # several checkpoints
        ids = [w.put(d) for d in datas]
        w.commit()
    assert [objects.get(i) for i in ids] == datas
    assert w.stats.written_objects == len(set(ids))
    assert set(threading.enumerate()) <= before


def test_a_file_over_several_read_blocks_restores_byte_identical(store: Store, tmp_path: Path):
    rnd = random.Random(4)
    spec = {"big.bin": rnd.randbytes(40 << 20),  # three 16 MiB reads of the chunker
            **{f"small/{i}": rnd.randbytes(rnd.randint(1, 50_000)) for i in range(200)}}
    write_tree(tmp_path / "src", spec)
    tree = store.snapshot(tmp_path / "src")
    store.restore(tree, tmp_path / "out")
    assert describe(tmp_path / "out") == describe(tmp_path / "src")


def _opened_with(monkeypatch) -> list[tuple[str, int]]:
    """(name, flags) of every file the store creates from now on."""
    seen, real = [], os.open

    def spy(path, flags, *args, **kw):
        if os.path.basename(str(path)).startswith(".tmp-"):
            seen.append((os.path.basename(str(path)), flags))
        return real(path, flags, *args, **kw)
    monkeypatch.setattr(os, "open", spy)
    return seen


@pytest.mark.parametrize("by", ["backend", "writer"])      # store_direct_io; an import's writer
def test_with_direct_io_large_objects_go_to_the_disk_directly_and_small_ones_through_the_page_cache(
        tmp_path: Path, monkeypatch, by: str):
    assert not LocalBackend(tmp_path / "default").direct         # off unless asked (store_direct_io)
    objects = Objects(LocalBackend(tmp_path / "objects", direct=by == "backend"), Keys(os.urandom(32)))
    opened = _opened_with(monkeypatch)
    big, small = random.Random(5).randbytes(3 << 20), random.Random(6).randbytes(1000)
    with objects.writer(workers=2, direct=True if by == "writer" else None) as w:
        ids = [w.put(big), w.put(small)]
        w.commit()
    assert [objects.get(i) for i in ids] == [big, small]
    direct = {name.split("-")[1][:8]: bool(flags & os.O_DIRECT) for name, flags in opened}
    assert direct == {ids[0].hex[:8]: True, ids[1].hex[:8]: False}
    assert objects.backend.direct == (by == "backend")
    opened.clear()
    with objects.writer(workers=2, direct=False) as w:          # a writer may also decline it
        w.put(random.Random(8).randbytes(1 << 20))
        w.commit()
    assert [bool(flags & os.O_DIRECT) for _, flags in opened] == [False]


@pytest.mark.parametrize("refused_at", ["open", "write"])
def test_a_filesystem_that_refuses_direct_io_gets_the_page_cache_and_loses_nothing(tmp_path: Path, monkeypatch,
                                                                                     caplog, refused_at: str):
    """tmpfs refuses O_DIRECT at open; some filesystems take the flag and refuse the write."""
    import errno

    from floydd.store import fileio, local

    backend = LocalBackend(tmp_path / "objects", direct=True)
    objects = Objects(backend, Keys(os.urandom(32)))
    real_open = os.open

    def refusing_open(path, flags, *args, **kw):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args, **kw)

    def refusing_write(fd, data):
        raise OSError(errno.EINVAL, "Invalid argument")
    if refused_at == "open":
        monkeypatch.setattr(os, "open", refusing_open)
    else:
        monkeypatch.setattr(local, "write_direct", refusing_write)
    data = [random.Random(7 + i).randbytes(1 << 20) for i in range(3)]
    with caplog.at_level("INFO", logger="floydd.store"), objects.writer(workers=2) as w:
        ids = [w.put(d) for d in data]
        w.commit()
    assert [objects.get(i) for i in ids] == data
    assert not backend.direct and "refused direct I/O" in caplog.text
    assert not list((tmp_path / "objects").glob("*/.tmp-*"))       # nothing half-written left


@pytest.mark.parametrize("direct", [False, True])
def test_reusing_a_files_chunks_proves_each_and_refuses_the_lot_if_one_is_damaged(tmp_path: Path, direct: bool):
    objects = Objects(LocalBackend(tmp_path / "objects", direct=direct), Keys(os.urandom(32)))
    chunks = [random.Random(20 + i).randbytes(200_000) for i in range(6)]
    with objects.writer(workers=2) as w:
        ids = [w.put(c) for c in chunks]
        w.commit()
    path = objects.backend.path(ids[3])
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    path.write_bytes(bytes(damaged))
    with objects.writer(workers=2) as w:
        assert w.reuse_all(ids[:3])                 # proven at once, each of them
        assert not w.reuse_all(ids)                 # one damaged: the caller reads the file again
        assert w.stats.reused_objects == 5
        assert [w.put(c) for c in chunks] == ids    # and puts it: the damaged one is written again
        assert w.stats.healed_objects == 1 and w.stats.written_objects == 1
        w.commit()
    assert [objects.get(i) for i in ids] == chunks
