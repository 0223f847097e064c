from __future__ import annotations

import os
import random

from floydd.store.chunker import DEFAULT_PARAMS, Chunker


def _ids(chunks):
    import hashlib
    return [hashlib.blake2b(bytes(c), digest_size=16).digest() for c in chunks]


def test_chunks_cover_the_input_within_bounds():
    data = random.Random(1).randbytes(24 << 20)
    chunks = [bytes(c) for c in Chunker().cut_buffer(data)]
    assert b"".join(chunks) == data
    assert all(len(c) <= DEFAULT_PARAMS.max_size for c in chunks)
    assert all(len(c) >= DEFAULT_PARAMS.min_size for c in chunks[:-1])
    mean = len(data) / len(chunks)
    assert 0.7 * (1 << 20) < mean < 2 * (1 << 20), mean


class _Dribble:
    """A stream that returns short reads, as pipes and some filesystems do."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._pos, self._step = data, 0, step

    def readinto(self, buf) -> int:
        n = min(len(buf), self._step, len(self._data) - self._pos)
        buf[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


def test_stream_and_buffer_agree_across_blocks():
    import io
    data = random.Random(2).randbytes(45 << 20)  # several 16 MiB read blocks
    c = Chunker(seed=7)
    expected = [bytes(x) for x in c.cut_buffer(data)]
    assert [bytes(x) for x in c.cut_stream(io.BytesIO(data), len(data))] == expected
    assert [bytes(x) for x in c.cut_stream(_Dribble(data, 3_000_001), len(data))] == expected
    small = data[:5000]
    assert [bytes(x) for x in c.cut_stream(io.BytesIO(small), len(small))] == [small]
    assert list(c.cut_stream(io.BytesIO(b""), 0)) == []


def test_stream_stops_at_limit():
    import io
    data = os.urandom(3 << 20)
    got = b"".join(bytes(x) for x in Chunker().cut_stream(io.BytesIO(data), 1 << 20))
    assert got == data[:1 << 20]


def test_one_byte_change_in_64_mib_touches_at_most_3_chunks():
    data = bytearray(random.Random(3).randbytes(64 << 20))
    c = Chunker(seed=12345)
    before = set(_ids(c.cut_buffer(bytes(data))))
    data[len(data) // 2] ^= 0xFF
    after = _ids(c.cut_buffer(bytes(data)))
    new = [i for i in after if i not in before]
    assert 1 <= len(new) <= 3, len(new)


def test_insertion_resynchronises():
    data = random.Random(4).randbytes(32 << 20)
    c = Chunker()
    before = set(_ids(c.cut_buffer(data)))
    mid = len(data) // 3
    after = _ids(c.cut_buffer(data[:mid] + b"inserted!" + data[mid:]))
    assert len([i for i in after if i not in before]) <= 3


def test_seed_changes_cut_points():
    data = random.Random(5).randbytes(16 << 20)
    a = [len(x) for x in Chunker(seed=1).cut_buffer(data)]
    b = [len(x) for x in Chunker(seed=2).cut_buffer(data)]
    assert a != b
