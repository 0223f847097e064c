"""Reading an export file (the format: :mod:`floydd.bundle.container`), trusting nothing.

The :class:`Reader` names what is wrong: a file without the magic is not an export; a wrong
key is refused by the header's check value before any part is read; a flipped byte is refused
naming the part it lies in (the header of part 17 fails its check, record 3 of part 17, "log
of mnist/3", fails authentication, part 17's hash does not match, the manifest does not list
part 17 as it was read, the manifest's MAC or signature fails); a short file names the part it
ends in. Parts come in order and each must be read to its end before the next
(:meth:`Reader.parts` drains what the caller left), so a file is verified in one pass, in
bounded memory, from a pipe or an HTTP body as well as from a file; ``src`` is read a MiB
at a time.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import IO, Iterator

import blake3

from floydd.errors import from_payload
from floydd.bundle.container import (FORMATS, LAST, ZSTD, MAGIC, MAX_RECORD, Damaged, NotAnExport, Truncated, WrongKey,
                                       _ERROR, _FOOTER, _HINT, _PART, _PART_END, _TRAILER, _U32, _U64)
from floydd.bundle.crypto import RECORD_OVERHEAD, ExportKey, RecordSealer
from floydd.bundle.signing import Origin, verify

__all__ = ["Reader", "Part", "read_header"]

_MAX_JSON = 256 << 20
_BLOCK = 1 << 20


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
            self._records = self._reader._records(self, keep=True)
        return self._records

    def views(self) -> Iterator[memoryview]:
        """:meth:`records` as views of the reader's buffers, each valid until the next record
        is asked for (copy what you keep): no fresh memory per record."""
        if self._records is None:
            self._records = self._reader._records(self, keep=False)
        return self._records


class Reader:
    """Reads and verifies one export from ``src`` (anything with ``read``)."""

    def __init__(self, src: IO[bytes], key: ExportKey | None, *, where: str = "the export",
                 decrypt: bool = True) -> None:
        self._src, self._key, self.where = src, key, where
        self._readinto = getattr(src, "readinto", None)
        self._buf = bytearray(_BLOCK)           # src's bytes from _at to _end not read yet
        self._at = self._end = 0
        self._plain = bytearray()               # a record opened for views(), reused
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
        self._flags = (0, LAST, ZSTD) if self.header["format"] >= 2 else (0, LAST)
        self._unzstd = None

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
            for _ in part.views():     # what the caller left unread is still checked
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
        if not isinstance(header, dict) or header.get("format") not in FORMATS:
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

    def _records(self, part: Part, *, keep: bool) -> Iterator[bytes | memoryview]:
        """``keep``: each record its own bytes; else views of buffers reused for the next."""
        hasher = part._hash
        count = size = 0
        while True:
            frame = self._exact(5, part.label)
            if frame[:4] == _ERROR:              # the writer failed between two records: why
                raise self._error_frame(frame[4:])
            flags, n = frame[0], _U32.unpack(frame[1:])[0]
            if flags not in self._flags or not RECORD_OVERHEAD <= n <= MAX_RECORD + RECORD_OVERHEAD:
                raise self._damaged_part(part, f"record {count} is malformed (byte {self.position - 5})")
            sealed = self._view(n, part.label)
            hasher.update(frame)
            hasher.update(sealed)
            plain: bytes | memoryview | None = sealed
            if self._decrypt:
                if keep:
                    plain = self._sealer.open(part.index, count, flags, sealed)
                else:
                    if len(self._plain) < n:
                        self._plain = bytearray(max(n, _BLOCK))   # replaced: a view of the old may live on
                    plain = self._sealer.open_into(part.index, count, flags, sealed, self._plain)
                if plain is None:
                    raise self._damaged_part(part, f"record {count} fails authentication")
                if flags == ZSTD:
                    plain = self._unpack(part, count, plain)
            elif keep:
                plain = bytes(sealed)
            count += 1
            if flags == LAST:
                if self._decrypt and plain:
                    raise self._damaged_part(part, "its end record is not empty")
                break
            size += n - RECORD_OVERHEAD           # as stored (compressed where it is)
            yield plain
        if self._exact(4, part.label) != _PART_END or self._exact(32, part.label) != hasher.digest():
            raise self._damaged_part(part, "its checksum does not match")
        self._read_parts.append({"index": part.index, "kind": part.kind, "name": part.name, "records": count,
                                 "bytes": size, "hash": hasher.hexdigest()})

    def _unpack(self, part: Part, count: int, packed: bytes | memoryview) -> bytes:
        """A compressed record's bytes; at most :data:`MAX_RECORD` of them (a record that says
        more, or does not decompress, is damage: it was sealed, so only a key holder made it)."""
        if self._unzstd is None:
            import zstandard
            self._unzstd = zstandard
        z = self._unzstd
        try:
            size = z.frame_content_size(packed)
            if not 0 <= size <= MAX_RECORD:
                raise z.ZstdError(f"a frame of {size} bytes")
            plain = z.ZstdDecompressor().decompress(packed, max_output_size=size)
        except z.ZstdError:
            raise self._damaged_part(part, f"record {count} does not decompress") from None
        if len(plain) != size:
            raise self._damaged_part(part, f"record {count} does not decompress")
        return plain

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
        """Up to ``n`` bytes (fewer only at the end of the file)."""
        got = min(n, self._fill(n))
        data = bytes(self._buf[self._at:self._at + got])
        self._at += got
        return data

    def _exact(self, n: int, within: str) -> bytes:
        """``n`` bytes (a small piece of the frame: its own bytes)."""
        return bytes(self._view(n, within))

    def _view(self, n: int, within: str) -> memoryview:
        """``n`` bytes as a view of the buffer, valid until the next read; ``Truncated`` if the
        file ends before."""
        got = self._fill(n)
        if got < n:
            self.position += got
            self._at = self._end
            raise Truncated(f"{self.where} ends at byte {self.position}, inside {within}: it is "
                            "truncated (or that part is damaged)",
                            hint="copy the whole file again, or export again")
        view = memoryview(self._buf)[self._at:self._at + n]
        self._at += n
        self.position += n
        return view

    def _fill(self, n: int) -> int:
        """Read ``src`` until ``n`` bytes are buffered (or it ends): how many are. What is left
        moves to the front first where ``n`` would not fit after it; a buffer too small for ``n``
        is replaced by a larger one (views of the old one may still be alive)."""
        have = self._end - self._at
        if have >= n:
            return have
        if self._at + n > len(self._buf):
            if n > len(self._buf):
                new = bytearray(max(n, _BLOCK))
                new[:have] = memoryview(self._buf)[self._at:self._end]
                self._buf = new
            else:
                view = memoryview(self._buf)
                view[:have] = view[self._at:self._end]
            self._at, self._end = 0, have
        while self._end - self._at < n:
            room = memoryview(self._buf)[self._end:]
            if self._readinto is not None:
                got = self._readinto(room)
            else:
                data = self._src.read(len(room))
                got = len(data)
                room[:got] = data
            if not got:
                break
            self._end += got
        return self._end - self._at

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
