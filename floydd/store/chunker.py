"""Content-defined chunking: pyfastcdc (FastCDC 2020, Cython, releases the GIL).

Cut points depend on content, so inserting or changing a byte moves at most the chunk it
falls in (and the next one) and everything else dedups. Sizes: min 256 KiB, nominal
average 1 MiB, max 4 MiB (pyfastcdc's real mean is about avg + min/2, ~1.2 MiB measured).
Files up to ``WHOLE_MAX`` are stored whole as one object: one read, no chunker call,
the per-file cost of a 10k-small-files tree stays one open and one read.

Why pyfastcdc: see ``bench/store_ingest.py`` (chunker comparison). The Cython build cuts
at ~2.5 GB/s on one core here, the pure-Python implementations at single-digit MB/s, and
fixed-size blocks lose all dedup after an insertion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator

from pyfastcdc.cy import FastCDC

__all__ = ["ChunkerParams", "Chunker", "DEFAULT_PARAMS", "WHOLE_MAX"]

WHOLE_MAX = 1 << 20
_BLOCK = 16 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkerParams:
    min_size: int = 256 << 10
    avg_size: int = 1 << 20
    max_size: int = 4 << 20


DEFAULT_PARAMS = ChunkerParams()


class Chunker:
    """Cuts streams into chunks. One instance per thread (pyfastcdc objects are not shared)."""

    def __init__(self, params: ChunkerParams = DEFAULT_PARAMS, *, seed: int = 0) -> None:
        self.params = params
        self._cdc = FastCDC(params.avg_size, min_size=params.min_size, max_size=params.max_size, seed=seed)

    def cut_buffer(self, data: bytes | memoryview) -> Iterator[memoryview]:
        """Chunks of an in-memory buffer, as views into it."""
        for chunk in self._cdc.cut_buf(data):
            yield chunk.data

    def cut_stream(self, stream: BinaryIO, limit: int) -> Iterator[memoryview]:
        """Chunks of at most ``limit`` bytes read from ``stream``, cut exactly as
        ``cut_buffer`` would cut the whole content.

        Reads ``_BLOCK`` bytes at a time and cuts them in one call; only the last chunk of
        a block (which may continue in the next one) is carried over. pyfastcdc's own
        ``cut_stream`` moves up to ``max_size`` bytes after *every* chunk, which made it
        the costliest step of an ingest. Each view is valid only until the next one is
        produced: copy what you keep.
        """
        reader = _Capped(stream, limit)
        buf = bytearray(_BLOCK + self.params.max_size)
        whole = memoryview(buf)
        filled = 0
        eof = False
        while True:
            while filled < len(buf) and not eof:
                n = reader.readinto(whole[filled:])
                if n == 0:
                    eof = True
                filled += n
            if filled == 0:
                return
            last = None
            for chunk in self._cdc.cut_buf(whole[:filled]):
                if last is not None:
                    yield last.data
                last = chunk
            if last is None:
                return
            if eof:
                yield last.data
                return
            carry_from, carry_len = last.offset, last.length
            del last, chunk
            buf[:carry_len] = buf[carry_from:carry_from + carry_len]
            filled = carry_len


class _Capped:
    """A ``readinto`` that stops at ``limit`` bytes, so a file growing while it is read
    cannot make a snapshot endless; the caller notices the growth by fstat afterwards."""

    __slots__ = ("_stream", "_left")

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self._stream = stream
        self._left = limit

    def readinto(self, buf: memoryview) -> int:
        if self._left <= 0:
            return 0
        view = buf[:self._left] if len(buf) > self._left else buf
        n = self._stream.readinto(view) or 0
        self._left -= n
        return n
