"""``/v1/export`` and ``/v1/import`` through a real daemon and the typed client: the file streams
out and back in, a box alone signs with its node key, and what is wrong is refused as JSON."""

from __future__ import annotations

import io
from pathlib import Path

import msgspec
import pytest

from floydd.api.schemas import ImportResult
from floydd.client import Client
from floydd.errors import FloyddError, NotFound
from floydd.bundle import ExportKey, Reader

KEY = ExportKey.new()


@pytest.fixture(scope="module")
def client(api) -> Client:
    return Client(address=api.url.removeprefix("http://"), token=api.token, timeout=60)


def _export(client: Client, path: Path, **kw) -> Reader:
    with client.export(key_hex=KEY.hex, **kw) as (stream, size), open(path, "wb") as out:
        data = _read_all(stream)
        out.write(data)
    assert size and size >= len(data) // 2
    reader = Reader(io.BytesIO(data), KEY, where=path.name)
    for _ in reader.parts():
        pass
    return reader


def test_a_job_goes_out_and_comes_back_in_as_a_new_number(client, api, tmp_path):
    reader = _export(client, tmp_path / "seed.floydx", jobs=["seed"])
    assert reader.origin.kind == "box"                   # a daemon never floydd init-ed
    assert reader.manifest["contents"] == {"jobs": ["seed/1"], "datasets": [], "mounted": ["mnist:1"], "skipped": []}
    with open(tmp_path / "seed.floydx", "rb") as f:
        result = client.import_file(f, key_hex=KEY.hex, name="seed.floydx")
    msgspec.convert(result, ImportResult)                # the answer is what the spec says
    [job] = result["jobs"]
    assert job["origin_job"] == "seed/1" and job["new"] and job["job"] != "seed/1"
    assert result["datasets"][0]["origin_ref"] == "mnist:1"
    imported = client.job(job["job"])
    assert imported["state"] == "success" and imported["imported"]["job"] == "seed/1"
    assert imported["params"] == client.job("seed/1")["params"]
    assert b"hello" in b"".join(client.logs(job["job"]))
    with open(tmp_path / "seed.floydx", "rb") as f:       # again: nothing new
        again = client.import_file(f, key_hex=KEY.hex)
    assert again["jobs"] == [{**job, "new": False}]


def test_a_damaged_file_a_wrong_key_and_no_file_are_refused_saying_why(client, tmp_path):
    path = tmp_path / "d.floydx"
    _export(client, path, datasets=["mnist"])
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x04
    cases = [(bytes(data), KEY, 400, "export_damaged", "part"),
             (path.read_bytes(), ExportKey.new(), 400, "wrong_export_key", "another key"),
             (b"just some bytes, not an export at all", KEY, 400, "not_an_export", "not a floyd export"),
             (path.read_bytes()[:-40], KEY, 400, "export_truncated", "truncated")]
    for body, key, status, code, words in cases:
        (tmp_path / "bad").write_bytes(body)
        with open(tmp_path / "bad", "rb") as f, pytest.raises(FloyddError) as info:
            client.import_file(f, key_hex=key.hex, name="d.floydx")
        assert (info.value.status, info.value.code) == (status, code), info.value.message
        assert words in info.value.message and "d.floydx" in info.value.message


def test_what_cannot_be_exported_is_refused_before_the_file_starts(client, tmp_path):
    with pytest.raises(NotFound):
        _export(client, tmp_path / "x.floydx", jobs=["nothing/7"])
    with pytest.raises(FloyddError, match="not an export key"):
        with client.export(key_hex="00", jobs=["seed"]):
            pass


def _read_all(stream) -> bytes:
    out = bytearray()
    while block := stream.read(1 << 20):
        out += block
    return bytes(out)
