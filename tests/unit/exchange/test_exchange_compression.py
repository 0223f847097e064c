"""Format 2 of the export container: records compressed (zstd) inside the seal where that pays;
format 1 files still read; a compressed record that lies about itself is damage."""

from __future__ import annotations

import io
import os

import pytest
import zstandard

from floydd.bundle import container
from floydd.bundle.container import MAX_RECORD, ZSTD, Damaged, Writer
from floydd.bundle.crypto import ExportKey, RecordSealer
from floydd.bundle.signing import sign, signer
from floydd.security.identity import NodeIdentity
from tests.unit.exchange.test_exchange_format import export, read_all

TEXT = b"".join(b"%d epoch %d loss %.6f\n" % (i, i % 7, 1 / (i + 1)) for i in range(60_000))   # a log: ~1.4 MB
NOISE = os.urandom(3 << 20)                                                                      # weights, images


@pytest.fixture(scope="module")
def lone(tmp_path_factory) -> NodeIdentity:
    return NodeIdentity.load_or_create(tmp_path_factory.mktemp("lone"))


def _flags(data: bytes, key: ExportKey, monkeypatch) -> list[int]:
    """The flags of every record, as the reader opens them."""
    seen: list[int] = []
    real = RecordSealer.open

    def spy(self, part, record, flags, sealed):
        seen.append(flags)
        return real(self, part, record, flags, sealed)
    with monkeypatch.context() as m:
        m.setattr(RecordSealer, "open", spy)
        read_all(data, key)
    return seen


def test_text_is_stored_compressed_noise_as_it_is_and_both_read_back(lone, monkeypatch):
    key = ExportKey.new()
    parts = [("log", "log of a/1", [TEXT]), ("data", "data of a:1", [NOISE])]
    data = export(lone, key, parts)
    assert len(data) < len(TEXT) // 4 + len(NOISE) + 4096, "the log shrank; the noise did not grow"
    reader, got = read_all(data, key)
    assert got == parts
    assert _flags(data, key, monkeypatch) == [ZSTD, 1, 0, 1], "log compressed, noise stored as it is (then each part's end)"
    listed = {p["name"]: p["bytes"] for p in reader.manifest["parts"]}
    assert listed["data of a:1"] == len(NOISE) and listed["log of a/1"] < len(TEXT) // 4
    _, unverified = read_all(data, key, decrypt=False)          # the CLI checks the stream without opening it
    assert [name for _, name, _ in unverified] == ["log of a/1", "data of a:1"]


def test_a_format_1_file_still_reads(lone, monkeypatch):
    key = ExportKey.new()
    monkeypatch.setattr(container, "FORMAT", 1)
    monkeypatch.setattr(Writer, "compress", lambda self, data: None)    # what 0.3 wrote: never compressed
    old = export(lone, key, [("log", "log of a/1", [TEXT])])
    monkeypatch.undo()
    reader, got = read_all(old, key)
    assert reader.header["format"] == 1 and got == [("log", "log of a/1", [TEXT])]


def test_a_format_1_file_with_a_compressed_record_is_damaged(lone, monkeypatch):
    key = ExportKey.new()
    monkeypatch.setattr(container, "FORMAT", 1)
    data = export(lone, key, [("log", "log of a/1", [TEXT])])
    monkeypatch.undo()
    with pytest.raises(Damaged, match="malformed"):
        read_all(data, key)


def _forged(identity: NodeIdentity, key: ExportKey, packed: bytes) -> bytes:
    """A file whose one record carries the ZSTD flag over ``packed`` (only a key holder can)."""
    out = io.BytesIO()
    w = Writer(out, key, kdf={"kind": "random"}, file_id=os.urandom(16), created=1.0)
    with w.part("log", "log of a/1") as p:
        p._record(ZSTD, packed)
    w.finish({}, signer(identity), lambda body: sign(identity, body))
    return out.getvalue()


@pytest.mark.parametrize("packed", [
    b"not a zstd frame at all" * 20,
    zstandard.ZstdCompressor().compress(b"\0" * (MAX_RECORD + 1)),          # a bomb past the record limit
    zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 5000),  # no size said
], ids=["garbage", "too-large", "no-size"])
def test_a_compressed_record_that_lies_is_damage_naming_its_part(lone, packed):
    key = ExportKey.new()
    with pytest.raises(Damaged, match="log of a/1.*record 0 does not decompress|record 0 does not decompress"):
        read_all(_forged(lone, key, packed), key)


def test_a_record_packed_in_pieces_elsewhere_reads_back_as_the_pieces_joined(lone, monkeypatch):
    """An export's chunk records are compressed on its read-ahead threads (container.pack): a
    chunk's id and its bytes, without joining them first."""
    key, head = ExportKey.new(), os.urandom(32)
    zstd = container.compressor()
    assert container.pack(zstd, head, NOISE) is None                    # judged by its probe: as it is
    packed = container.pack(zstd, head, TEXT)
    assert packed is not None and len(packed) < len(TEXT) // 4
    out = io.BytesIO()
    w = Writer(out, key, kdf={"kind": "random"}, file_id=os.urandom(16), created=1.0)
    with w.part("data", "data of a:1") as p:
        p.write(head + TEXT, packed)
        p.write(head + NOISE, None)
    w.finish({}, signer(lone), lambda body: sign(lone, body))
    _, got = read_all(out.getvalue(), key)
    assert got == [("data", "data of a:1", [head + TEXT, head + NOISE])]
    assert _flags(out.getvalue(), key, monkeypatch) == [ZSTD, 0, 1]
