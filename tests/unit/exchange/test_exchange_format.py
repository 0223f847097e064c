"""The export container: what it reads back, and how it refuses damage, truncation and wrong keys."""

from __future__ import annotations

import io
import os

import pytest

from floydd.bundle.container import Damaged, NotAnExport, Truncated, WrongKey, Writer, error_frame
from floydd.bundle.reader import Reader
from floydd.bundle.crypto import SCRYPT, ExportKey, new_salt
from floydd.bundle.signing import sign, signer
from floydd.errors import IntegrityError, NotFound
from floydd.security.identity import NodeIdentity, init_cluster

PARTS = [("data", "data of mnist:2", [os.urandom(3000), os.urandom(70_000)]),
         ("job", "job mnist/3", [b'{"id": "mnist/3"}']),
         ("log", "log of mnist/3", [b"line one\n" * 50, b"line two\n"]),
         ("events", "events of mnist/3", [])]


@pytest.fixture(scope="module")
def lone(tmp_path_factory) -> NodeIdentity:
    return NodeIdentity.load_or_create(tmp_path_factory.mktemp("lone"))


@pytest.fixture(scope="module")
def member(tmp_path_factory) -> NodeIdentity:
    root = tmp_path_factory.mktemp("member")
    return init_cluster(root / "ca", root / "tls", "lab-a", ["127.0.0.1"])[1]


def export(identity: NodeIdentity, key: ExportKey, parts=PARTS) -> bytes:
    out = io.BytesIO()
    w = Writer(out, key, kdf={"kind": "random"}, file_id=os.urandom(16), created=1.0)
    for kind, name, records in parts:
        with w.part(kind, name) as p:
            for r in records:
                p.write(r)
    w.finish({"jobs": ["mnist/3"]}, signer(identity), lambda body: sign(identity, body))
    return out.getvalue()


def read_all(data: bytes, key: ExportKey | None, **kw) -> tuple[Reader, list]:
    r = Reader(io.BytesIO(data), key, where="x.floydx", **kw)
    got = [(p.kind, p.name, list(p.records())) for p in r.parts()]
    return r, got


def test_what_is_written_reads_back_with_its_origin(member):
    key = ExportKey.new()
    reader, got = read_all(export(member, key), key)
    assert got == PARTS
    assert reader.manifest["jobs"] == ["mnist/3"]
    assert [p["name"] for p in reader.manifest["parts"]] == [name for _, name, _ in PARTS]
    assert reader.origin.kind == "cluster" and reader.origin.name == "lab-a"
    assert reader.origin.fingerprint == member.cluster_fingerprint
    assert reader.origin.node_id == member.node_id


def test_a_lone_box_signs_with_its_node_key_and_says_so(lone):
    key = ExportKey.new()
    reader, _ = read_all(export(lone, key), key)
    assert reader.origin.kind == "box" and reader.origin.fingerprint.startswith("box:")
    assert "alone" in reader.origin.describe()
    again, _ = read_all(export(lone, key), key)
    assert again.origin.fingerprint == reader.origin.fingerprint     # the same box, the same origin


def test_a_flipped_byte_anywhere_is_refused_naming_where_it_lies(member):
    key = ExportKey.new()
    data = export(member, key)
    names = [name for _, name, _ in PARTS]
    bounds = _part_bounds(data, key)
    step = max(1, len(data) // 400)
    for pos in list(range(0, len(data), step)) + [len(data) - 1]:
        damaged = bytearray(data)
        damaged[pos] ^= 0x20
        with pytest.raises((IntegrityError, NotAnExport)) as info:
            read_all(bytes(damaged), key)
        message = info.value.message
        inside = [i for i, (start, end) in enumerate(bounds) if start <= pos < end]
        if inside:
            i = inside[0]
            assert f"part {i}" in message, (pos, message)
            # a part's own bytes name it; its header's, its index and the part before it
            assert names[i] in message or (i > 0 and names[i - 1] in message), (pos, message)
        else:
            assert any(w in message for w in ("header", "manifest", "footer", "not a floyd export", "signed")), \
                (pos, message)


def test_a_truncated_file_is_refused_saying_where_it_ends(member):
    key = ExportKey.new()
    data = export(member, key)
    for cut in (0, 5, 20, len(data) // 3, len(data) // 2, len(data) - 17, len(data) - 1):
        with pytest.raises((Truncated, NotAnExport)) as info:
            read_all(data[:cut], key)
        if cut > 100:
            assert isinstance(info.value, Truncated) and "truncated" in info.value.message
            assert f"byte {cut}" in info.value.message


def test_a_wrong_key_is_refused_before_any_part(member):
    data = export(member, ExportKey.new())
    with pytest.raises(WrongKey) as info:
        Reader(io.BytesIO(data), ExportKey.new(), where="x.floydx")
    assert "another key" in info.value.message


def test_a_passphrase_gives_the_same_key_from_the_header_salt():
    kdf = {"kind": "scrypt", "salt": new_salt(), **SCRYPT}
    a, b = ExportKey.from_passphrase("correct horse", kdf), ExportKey.from_passphrase("correct horse", kdf)
    assert a.hex == b.hex and ExportKey.from_passphrase("wrong horse", kdf).hex != a.hex
    assert ExportKey.from_text(a.text()).hex == a.hex == ExportKey.from_text(a.hex).hex
    assert ExportKey.from_text(a.text().upper().replace("-", " ")).hex == a.hex
    assert a.hex not in repr(a)


def test_anything_else_is_not_an_export():
    with pytest.raises(NotAnExport):
        Reader(io.BytesIO(b"PK\x03\x04 a zip file"), None)


def test_parts_moved_between_files_of_the_same_key_fail(member):
    key = ExportKey.new()
    one, two = export(member, key), export(member, key)
    split = _part_bounds(one, key)[1][0]
    with pytest.raises(IntegrityError):
        read_all(one[:split] + two[split:], key)


def test_a_writer_that_failed_says_why():
    key = ExportKey.new()
    out = io.BytesIO()
    w = Writer(out, key, kdf={"kind": "random"}, file_id=os.urandom(16), created=1.0)
    with w.part("job", "job a/1") as p:
        p.write(b"{}")
    between_parts = out.getvalue() + error_frame(NotFound("the box that ran a/2 is unreachable").to_payload())
    part = w.part("data", "data of a:1")
    part.write(b"x" * 100)
    inside_a_part = out.getvalue() + error_frame(NotFound("object 0a1b is not in the store").to_payload())
    for data, words in ((between_parts, "unreachable"), (inside_a_part, "not in the store")):
        with pytest.raises(NotFound, match=words):
            read_all(data, key)


def test_without_decrypting_the_structure_and_hashes_are_still_checked(member):
    key = ExportKey.new()
    data = bytearray(export(member, key))
    _, got = read_all(bytes(data), key, decrypt=False)
    assert [name for _, name, _ in got] == [name for _, name, _ in PARTS]
    start, end = _part_bounds(bytes(data), key)[2]
    data[(start + end) // 2] ^= 1
    with pytest.raises(Damaged, match="log of mnist/3"):
        read_all(bytes(data), key, decrypt=False)


def _part_bounds(data: bytes, key: ExportKey) -> list[tuple[int, int]]:
    """(first byte, byte after the end) of each part in ``data``."""
    r = Reader(io.BytesIO(data), key)
    bounds = []
    for part in r.parts():
        start = r.position - (4 + 4 + 1 + len(part.kind.encode()) + 2 + len(part.name.encode()) + 16)
        list(part.records())
        bounds.append((start, r.position))
    return bounds


class _Trickle:
    """A source with ``read`` alone, a few bytes a call (a pipe, an HTTP body)."""

    def __init__(self, data: bytes, most: int = 100_003) -> None:
        self._data, self._at, self._most = data, 0, most

    def read(self, n: int) -> bytes:
        piece = self._data[self._at:self._at + min(n, self._most)]
        self._at += len(piece)
        return piece


def test_a_source_that_trickles_and_records_larger_than_the_readers_buffer_read_back(member):
    key = ExportKey.new()
    big = os.urandom(3 << 20)                   # more than the reader's first buffer (1 MiB)
    parts = [("data", "data of x:1", [big, b"small", big[:5000]]), *PARTS[1:]]
    r = Reader(_Trickle(export(member, key, parts)), key, where="x.floydx")
    assert [(p.kind, p.name, list(p.records())) for p in r.parts()] == parts
    assert r.origin.fingerprint == member.cluster_fingerprint


def test_views_hold_each_record_until_the_next_in_one_reused_buffer(member):
    key = ExportKey.new()
    r = Reader(io.BytesIO(export(member, key)), key, where="x.floydx")
    for part, (_, _, records) in zip(r.parts(), PARTS):
        views = []
        for view in part.views():
            assert bytes(view) == records[len(views)]
            views.append(view)
        if part.kind == "data":                 # opened into the same buffer: no fresh memory a record
            assert len(views) == 2 and views[0].obj is views[1].obj
