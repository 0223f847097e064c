"""The export file: a framed container, written and read as a stream, every part named and hashed.

::

    header    "FLOYDX\\x01\\n" | u32 n | header JSON (n bytes) | BLAKE3(u32 n ‖ JSON)
              JSON: format, file_id, key_check, kdf ({"kind": "random"} or scrypt's salt and cost)
    part*     "FXPT" | u32 index | u8 n | kind | u16 n | name | BLAKE3(those bytes)[:16]
              record*   u8 flags | u32 n | sealed record (n bytes; crypto.RecordSealer);
                        flags ZSTD: the record was compressed (zstd, before sealing)
              end       a record with flags LAST and nothing in it (authenticated: a part cut
                        short, or records dropped from its end, fails there)
              "FXPE" | BLAKE3(the part's header and record frames)
    trailer   "FXTR" | u32 n | manifest JSON | u32 n | seal JSON
              manifest: the header's hash, every part (index, kind, name, records, bytes,
              hash), what the file holds, where it comes from; seal: the manifest's MAC
              (export key) and its signature (:mod:`floydd.bundle.signing`)
    footer    u64 offset of the trailer | "FXEND01\\n"

Compression (format 2): a record whose bytes compress (zstd level 3) to at most 31/32 of
their size is sealed compressed, with the ZSTD flag, which the seal authenticates; others are
sealed as they are. A large record is judged by a 64 KiB probe of its data first, so incompressible data
(most datasets: images, weights, packed shards) costs a small probe, not a full pass. A part's
``bytes`` in the manifest counts what its records hold as stored (compressed where they are),
so a reader checks it without the key. Files of format 1 (no compression) still read.

A writer that fails after it started (the daemon's export stream) ends the file with
``"FXER" | u32 n | {"error": ...}`` instead of a trailer, so the receiver says why, not
merely that the file is short.

Writing is here (:class:`Writer`); reading and every check is :mod:`floydd.bundle.reader`.
"""

from __future__ import annotations

import json
import struct
from typing import IO, Callable

import blake3

from floydd.errors import IntegrityError, UserError
from floydd.bundle.crypto import FILE_ID_SIZE, RECORD_OVERHEAD, ExportKey

__all__ = ["Writer", "PartWriter", "Damaged", "Truncated", "NotAnExport", "WrongKey", "MAGIC", "FORMAT", "FORMATS", "MAX_RECORD",
           "LAST", "ZSTD", "error_frame", "compressor", "pack"]

MAGIC = b"FLOYDX\x01\n"
FORMAT = 2
FORMATS = (1, 2)
"""What a reader reads: 1 has no compressed records."""
MAX_RECORD = 16 << 20
"""The most plaintext one record holds (chunks are at most 4 MiB, packs a little more)."""
LAST = 1
ZSTD = 2
_LEVEL = 3
_PROBE = 64 << 10
_PART, _PART_END, _TRAILER, _ERROR = b"FXPT", b"FXPE", b"FXTR", b"FXER"
_FOOTER = b"FXEND01\n"
_U32, _U64 = struct.Struct(">I"), struct.Struct(">Q")
_FRAME = 1 + _U32.size
"""A record's flags and length, before the sealed record."""
_JUDGE = object()


class Damaged(IntegrityError):
    """A byte of the file is not what was written: named by the part it lies in. The file is
    the caller's, not this box's store: a 400, not a 500."""

    code = "export_damaged"
    status = 400


class Truncated(IntegrityError):
    code = "export_truncated"
    status = 400


class NotAnExport(UserError):
    code = "not_an_export"


class WrongKey(UserError):
    code = "wrong_export_key"


_HINT = "the file was changed or damaged on the way: copy it again from the exporting site, or export again"


# -- writing ----------------------------------------------------------------------------------------

class Writer:
    """Writes one export to ``out`` (anything with ``write``): the header now, parts as asked."""

    def __init__(self, out: IO[bytes], key: ExportKey, *, kdf: dict, file_id: bytes, created: float,
                 buffers: Callable[[int], bytearray] = bytearray) -> None:
        """``buffers(n)``: a buffer of at least ``n`` bytes for one record's frame, which is then
        given to ``out.write`` (as a memoryview of it) and not touched again: an ``out`` that
        writes it later (a writing thread) hands out its own, reused once written."""
        if len(file_id) != FILE_ID_SIZE:
            raise ValueError("file_id must be 16 bytes")
        self._out = out
        self._buffers = buffers
        self.position = 0
        self._key = key
        self._sealer = key.records(file_id)
        self.parts: list[dict] = []
        header = json.dumps({"format": FORMAT, "file_id": file_id.hex(), "key_check": key.check, "kdf": kdf,
                             "created": created}, sort_keys=True).encode()
        framed = _U32.pack(len(header)) + header
        self.header_hash = blake3.blake3(framed).hexdigest()
        self._write(MAGIC + framed + bytes.fromhex(self.header_hash))
        self._open: PartWriter | None = None
        self._zstd = None

    def compress(self, data: bytes | memoryview) -> bytes | None:
        """``data`` compressed, or None where that does not pay (see the module docstring)."""
        if len(data) < 256:
            return None
        if self._zstd is None:
            self._zstd = compressor()
        return pack(self._zstd, data)

    def part(self, kind: str, name: str) -> PartWriter:
        """A new part (the previous one must be closed); use as a context manager."""
        if self._open is not None:
            raise RuntimeError(f"part {self._open.name!r} is still open")
        self._open = PartWriter(self, len(self.parts), kind, name)
        return self._open

    def finish(self, manifest: dict, signer: dict, sign: Callable[[bytes], str]) -> None:
        """The trailer: ``manifest`` (what the file holds) with the header's hash, the parts
        and the ``signer`` added; its MAC and ``sign(manifest bytes)``; then the footer."""
        if self._open is not None:
            raise RuntimeError(f"part {self._open.name!r} is still open")
        body = json.dumps({**manifest, "format": FORMAT, "header": self.header_hash, "parts": self.parts,
                           "signer": signer}, sort_keys=True).encode()
        seal = json.dumps({"mac": self._key.mac(body), "signature": sign(body)}, sort_keys=True).encode()
        start = self.position
        self._write(_TRAILER + _U32.pack(len(body)) + body + _U32.pack(len(seal)) + seal)
        self._write(_U64.pack(start) + _FOOTER)

    def _write(self, data: bytes | memoryview) -> None:
        self._out.write(data)
        self.position += len(data)


class PartWriter:
    def __init__(self, writer: Writer, index: int, kind: str, name: str) -> None:
        self._w, self.index, self.kind, self.name = writer, index, kind, name
        kind_b, name_b = kind.encode(), name.encode()
        if not 0 < len(kind_b) < 256 or not 0 < len(name_b) < 65536:
            raise ValueError(f"bad part kind or name: {kind!r} {name!r}")
        head = _PART + _U32.pack(index) + bytes([len(kind_b)]) + kind_b + struct.pack(">H", len(name_b)) + name_b
        head += blake3.blake3(head).digest(16)
        self._hash = blake3.blake3(head)
        self.records = 0
        self.bytes = 0
        self._closed = False
        self._w._write(head)

    def write(self, data: bytes | memoryview, packed: bytes | None | object = _JUDGE) -> None:
        """One record (at most :data:`MAX_RECORD` bytes); ``packed``: what :func:`pack` made of
        it beforehand (None: it does not compress), else it is judged here."""
        if len(data) > MAX_RECORD:
            raise ValueError(f"a record holds at most {MAX_RECORD} bytes, not {len(data)}")
        if packed is _JUDGE:
            packed = self._w.compress(data)
        if packed is None:
            self._record(0, data)
        else:
            self._record(ZSTD, packed)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._record(LAST, b"")
        digest = self._hash.digest()
        self._w._write(_PART_END + digest)
        self._w.parts.append({"index": self.index, "kind": self.kind, "name": self.name,
                              "records": self.records, "bytes": self.bytes, "hash": digest.hex()})
        self._w._open = None

    def _record(self, flags: int, data: bytes | memoryview) -> None:
        """The record's frame (flags, length, sealed record) sealed straight into one buffer."""
        n = _FRAME + RECORD_OVERHEAD + len(data)
        frame = memoryview(self._w._buffers(n))[:n]
        frame[0] = flags
        _U32.pack_into(frame, 1, n - _FRAME)
        self._w._sealer.seal_into(self.index, self.records, flags, data, frame[_FRAME:])
        self.bytes += len(data)
        self._hash.update(frame)
        self._w._write(frame)
        self.records += 1

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()


def compressor():
    """A zstd compressor for :func:`pack` (one per thread: it is not thread-safe)."""
    import zstandard       # only an export's writer needs it
    return zstandard.ZstdCompressor(level=_LEVEL)


def pack(zstd, *pieces: bytes | memoryview) -> bytes | None:
    """The record made of ``pieces`` (joined) compressed with ``zstd``, or None where that does
    not pay (see the module docstring; a large record is judged by its last piece's first
    64 KiB). Safe to call from other threads than the writer's, each with its own compressor."""
    n = sum(len(p) for p in pieces)
    if n < 256:
        return None
    if n > 2 * _PROBE and len(pieces[-1]) >= _PROBE:
        probe = zstd.compress(pieces[-1][:_PROBE])
        if len(probe) > _PROBE - _PROBE // 32:
            return None
    stream = zstd.compressobj(size=n)
    packed = b"".join([*(stream.compress(p) for p in pieces), stream.flush()])
    return packed if len(packed) <= n - n // 32 else None


def error_frame(payload: dict) -> bytes:
    """What a writer that failed mid-way sends instead of a trailer (see the module docstring)."""
    body = json.dumps(payload).encode()
    return _ERROR + _U32.pack(len(body)) + body
