"""The export file: a framed container, written and read as a stream, every part named and hashed.

::

    header    "FLOYDX\\x01\\n" | u32 n | header JSON (n bytes) | BLAKE3(u32 n ‖ JSON)
              JSON: format, file_id, key_check, kdf ({"kind": "random"} or scrypt's salt and cost)
    part*     "FXPT" | u32 index | u8 n | kind | u16 n | name | BLAKE3(those bytes)[:16]
              record*   u8 flags | u32 n | sealed record (n bytes; crypto.RecordSealer)
              end       a record with flags LAST and nothing in it (authenticated: a part cut
                        short, or records dropped from its end, fails there)
              "FXPE" | BLAKE3(the part's header and record frames)
    trailer   "FXTR" | u32 n | manifest JSON | u32 n | seal JSON
              manifest: the header's hash, every part (index, kind, name, records, bytes,
              hash), what the file holds, where it comes from; seal: the manifest's MAC
              (export key) and its signature (:mod:`floydd.exchange.signing`)
    footer    u64 offset of the trailer | "FXEND01\\n"

A writer that fails after it started (the daemon's export stream) ends the file with
``"FXER" | u32 n | {"error": ...}`` instead of a trailer, so the receiver says why, not
merely that the file is short.

The :class:`Reader` trusts nothing and names what is wrong: a file without the magic is not
an export; a wrong key is refused by the header's check value before any part is read; a
flipped byte is refused naming the part it lies in (the header of part 17 fails its check,
record 3 of part 17, "log of mnist/3", fails authentication, part 17's hash does not match,
the manifest does not list part 17 as it was read, the manifest's MAC or signature fails); a
short file names the part it ends in. Parts come in order and each must be read to its end
before the next (:meth:`Reader.parts` drains what the caller left), so a file is verified in
one pass, in bounded memory, from a pipe or an HTTP body as well as from a file.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import IO, Callable, Iterator

import blake3

from floydd.errors import IntegrityError, UserError, from_payload
from floydd.exchange.crypto import FILE_ID_SIZE, RECORD_OVERHEAD, ExportKey, RecordSealer
from floydd.exchange.signing import Origin, verify

__all__ = ["Writer", "PartWriter", "Reader", "Part", "Damaged", "Truncated", "NotAnExport", "WrongKey",
           "MAGIC", "FORMAT", "MAX_RECORD", "read_header", "error_frame"]

MAGIC = b"FLOYDX\x01\n"
FORMAT = 1
MAX_RECORD = 16 << 20
"""The most plaintext one record holds (chunks are at most 4 MiB, packs a little more)."""
LAST = 1
_PART, _PART_END, _TRAILER, _ERROR = b"FXPT", b"FXPE", b"FXTR", b"FXER"
_FOOTER = b"FXEND01\n"
_U32, _U64 = struct.Struct(">I"), struct.Struct(">Q")
_MAX_JSON = 256 << 20
_BLOCK = 1 << 20


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

    def __init__(self, out: IO[bytes], key: ExportKey, *, kdf: dict, file_id: bytes, created: float) -> None:
        if len(file_id) != FILE_ID_SIZE:
            raise ValueError("file_id must be 16 bytes")
        self._out = out
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

    def write(self, data: bytes | memoryview) -> None:
        """One record (at most :data:`MAX_RECORD` bytes)."""
        if len(data) > MAX_RECORD:
            raise ValueError(f"a record holds at most {MAX_RECORD} bytes, not {len(data)}")
        self._record(0, data)
        self.bytes += len(data)

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
        sealed = self._w._sealer.seal(self.index, self.records, flags, data)
        frame = bytes([flags]) + _U32.pack(len(sealed))
        self._hash.update(frame)
        self._hash.update(sealed)
        self._w._write(frame)
        self._w._write(sealed)
        self.records += 1

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()


def error_frame(payload: dict) -> bytes:
    """What a writer that failed mid-way sends instead of a trailer (see the module docstring)."""
    body = json.dumps(payload).encode()
    return _ERROR + _U32.pack(len(body)) + body


# -- reading ----------------------------------------------------------------------------------------

@dataclass(slots=True)
class Part:
    """One part as read: consume :meth:`records` (or let :meth:`Reader.parts` drain it)."""

    index: int
    kind: str
    name: str
    _reader: "Reader"
    _hash: object = None
    _records: Iterator[bytes] | None = None

    @property
    def label(self) -> str:
        return f"part {self.index} ({self.name})"

    def records(self) -> Iterator[bytes]:
        """The part's records, opened and checked (raw sealed bytes when the reader does not
        decrypt); the part's end and hash are checked after the last."""
        if self._records is None:
            self._records = self._reader._records(self)
        return self._records


class Reader:
    """Reads and verifies one export from ``src`` (anything with ``read``)."""

    def __init__(self, src: IO[bytes], key: ExportKey | None, *, where: str = "the export",
                 decrypt: bool = True) -> None:
        self._src, self._key, self.where = src, key, where
        self._buf, self._at = b"", 0
        self.position = 0
        self._decrypt = decrypt and key is not None
        self._read_parts: list[dict] = []
        self._last_name = ""
        self.manifest: dict | None = None
        self.manifest_bytes = b""
        self.seal: dict = {}
        self.origin: Origin | None = None
        self.header, self.header_hash = self._header()
        if key is not None and not key.matches(self.header.get("key_check")):
            raise WrongKey(f"the key does not open {where}: it was sealed under another key",
                           hint="give the key printed by the floyd export that made this file (or its "
                                "--key-file, or its passphrase)")
        try:
            file_id = bytes.fromhex(self.header["file_id"])
        except (KeyError, TypeError, ValueError):
            raise self._damaged("its header is malformed") from None
        self._sealer: RecordSealer | None = key.records(file_id) if key is not None else None

    def parts(self) -> Iterator[Part]:
        """Every part in order; after the last, the trailer is read and checked (MAC with the
        key, the parts it lists against those read, the signature, the footer), and
        :attr:`manifest` and :attr:`origin` are set."""
        while True:
            tag = self._exact(4, "the next part")
            if tag == _TRAILER:
                self._trailer()
                return
            if tag == _ERROR:
                raise self._error_frame(b"")
            if tag != _PART:
                raise self._damaged(f"what follows {self._after()} is not a part (byte {self.position - 4})")
            part = self._part_header()
            yield part
            for _ in part.records():   # what the caller left unread is still checked
                pass

    # -- internals ------------------------------------------------------------------------------

    def _header(self) -> tuple[dict, str]:
        magic = self._take(len(MAGIC))
        self.position += len(magic)
        if magic != MAGIC:
            if magic.startswith(b"FLOYDX"):
                raise NotAnExport(f"{self.where} is a floyd export of another format version",
                                  hint="import it with the floyd version that made it, or a newer one")
            raise NotAnExport(f"{self.where} is not a floyd export (or its first bytes are damaged)",
                              hint="give the file floyd export --to wrote")
        raw_len = self._exact(4, "the header")
        (n,) = _U32.unpack(raw_len)
        if n > 1 << 16:
            raise self._damaged("its header is damaged (an impossible length)")
        body = self._exact(n, "the header")
        digest = self._exact(32, "the header").hex()
        if blake3.blake3(raw_len + body).hexdigest() != digest:
            raise self._damaged("its header is damaged (its checksum does not match)")
        try:
            header = json.loads(body)
        except ValueError:
            raise self._damaged("its header is damaged") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise NotAnExport(f"{self.where} is a floyd export of another format version",
                              hint="import it with the floyd version that made it, or a newer one")
        return header, digest

    def _part_header(self) -> Part:
        expected = len(self._read_parts)
        head = bytearray(_PART)
        head += self._exact(4, "a part's header")
        head += (kind_len := self._exact(1, "a part's header"))
        head += self._exact(kind_len[0], "a part's header")
        head += (name_len := self._exact(2, "a part's header"))
        head += self._exact(struct.unpack(">H", name_len)[0], "a part's header")
        check = self._exact(16, "a part's header")
        index = _U32.unpack(head[4:8])[0]
        kind = bytes(head[9:9 + kind_len[0]]).decode("utf-8", "replace")
        name = bytes(head[11 + kind_len[0]:]).decode("utf-8", "replace")
        if blake3.blake3(bytes(head)).digest(16) != check or index != expected:
            raise Damaged(f"{self.where} is damaged: the header of part {expected} (after {self._after()}; "
                          f"it reads {name[:80]!r}) fails its check", hint=_HINT)
        part = Part(index, kind, name, self, blake3.blake3(bytes(head) + check))
        self._last_name = part.label
        return part

    def _records(self, part: Part) -> Iterator[bytes]:
        hasher = part._hash
        count = size = 0
        while True:
            frame = self._exact(5, part.label)
            if frame[:4] == _ERROR:              # the writer failed between two records: why
                raise self._error_frame(frame[4:])
            flags, n = frame[0], _U32.unpack(frame[1:])[0]
            if flags not in (0, LAST) or not RECORD_OVERHEAD <= n <= MAX_RECORD + RECORD_OVERHEAD:
                raise self._damaged_part(part, f"record {count} is malformed (byte {self.position - 5})")
            sealed = self._exact(n, part.label)
            hasher.update(frame)
            hasher.update(sealed)
            plain: bytes | None = sealed
            if self._decrypt:
                plain = self._sealer.open(part.index, count, flags, sealed)
                if plain is None:
                    raise self._damaged_part(part, f"record {count} fails authentication")
            count += 1
            if flags == LAST:
                if self._decrypt and plain:
                    raise self._damaged_part(part, "its end record is not empty")
                break
            size += len(plain) if self._decrypt else n - RECORD_OVERHEAD
            yield plain
        if self._exact(4, part.label) != _PART_END or self._exact(32, part.label) != hasher.digest():
            raise self._damaged_part(part, "its checksum does not match")
        self._read_parts.append({"index": part.index, "kind": part.kind, "name": part.name, "records": count,
                                 "bytes": size, "hash": hasher.hexdigest()})

    def _trailer(self) -> None:
        start = self.position - 4
        body = self._exact(self._length("the manifest"), "the manifest")
        seal = self._exact(self._length("the manifest's seal"), "the manifest's seal")
        footer = self._exact(16, "the footer")
        if footer[8:] != _FOOTER or _U64.unpack(footer[:8])[0] != start:
            raise self._damaged("its footer is damaged")
        if self._take(1):
            raise self._damaged("bytes follow its footer")
        try:
            manifest, self.seal = json.loads(body), json.loads(seal)
        except ValueError:
            raise self._damaged("its manifest (the table of contents at its end) is damaged") from None
        if not isinstance(manifest, dict) or not isinstance(self.seal, dict):
            raise self._damaged("its manifest (the table of contents at its end) is damaged")
        if self._key is not None and not self._key.check_mac(body, self.seal.get("mac")):
            raise self._damaged("its manifest (the table of contents at its end) fails its check")
        if manifest.get("header") != self.header_hash:
            raise self._damaged("its manifest belongs to another header")
        listed = manifest.get("parts")
        if not isinstance(listed, list) or [_part_key(p) for p in listed] != [_part_key(p) for p in self._read_parts]:
            raise self._damaged(f"its manifest does not list the parts as they were read ({self._mismatch(listed)})")
        self.origin = verify(body, manifest.get("signer"), self.seal.get("signature"), where=self.where)
        self.manifest, self.manifest_bytes = manifest, body

    def _mismatch(self, listed: object) -> str:
        if not isinstance(listed, list):
            return "it lists none"
        for read, want in zip(self._read_parts, listed):
            if _part_key(read) != _part_key(want):
                return f"part {read['index']} ({read['name']}) differs"
        return f"it lists {len(listed)} parts, the file holds {len(self._read_parts)}"

    def _length(self, what: str) -> int:
        (n,) = _U32.unpack(self._exact(4, what))
        if n > _MAX_JSON:
            raise self._damaged(f"{what} is damaged (an impossible length)")
        return n

    def _error_frame(self, head: bytes) -> Exception:
        """The error a writer that failed sent (``head``: the first bytes of its length, read already)."""
        try:
            (n,) = _U32.unpack(head + self._exact(4 - len(head), "the error"))
            if n > 1 << 20:
                raise ValueError(n)
            payload = json.loads(self._exact(n, "the error"))
            return from_payload(payload, 500)
        except (ValueError, TypeError, AttributeError, KeyError):
            return self._damaged("it ends with a damaged error record")

    def _take(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the file), read from ``src`` a block at a time."""
        if self._at >= len(self._buf):
            self._buf, self._at = self._src.read(max(n, _BLOCK)), 0
        data = self._buf[self._at:self._at + n]
        self._at += len(data)
        return data

    def _exact(self, n: int, within: str) -> bytes:
        data = self._take(n)
        if len(data) < n:
            pieces, got = [data], len(data)
            while got < n:
                more = self._take(n - got)
                if not more:
                    self.position += got
                    raise Truncated(f"{self.where} ends at byte {self.position}, inside {within}: it is "
                                    "truncated (or that part is damaged)",
                                    hint="copy the whole file again, or export again")
                pieces.append(more)
                got += len(more)
            data = b"".join(pieces)
        self.position += n
        return data

    def _after(self) -> str:
        return self._last_name or "the header"

    def _damaged(self, why: str) -> Damaged:
        return Damaged(f"{self.where} is damaged: {why}", hint=_HINT)

    def _damaged_part(self, part: Part, why: str) -> Damaged:
        err = Damaged(f"{self.where} is damaged in {part.label}: {why}", hint=_HINT)
        err.part = part.name                    # type: ignore[attr-defined]
        return err


def read_header(src: IO[bytes], where: str = "the export") -> dict:
    """The header of an export (what a CLI needs to ask for the key: its ``kdf``)."""
    return Reader(src, None, where=where).header


def _part_key(p: object) -> tuple:
    if not isinstance(p, dict):
        return (None,)
    return (p.get("index"), p.get("kind"), p.get("name"), p.get("records"), p.get("bytes"), p.get("hash"))
