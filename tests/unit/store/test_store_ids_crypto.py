from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from floydd.errors import IntegrityError, InvalidSpec, StoreError
from floydd.store import ObjectId, Store
from floydd.store.keys.crypto import OVERHEAD, Keys, load_or_create_secret


def test_object_id_is_a_value_type():
    oid = ObjectId(bytes(range(32)))
    assert oid.hex == bytes(range(32)).hex() == str(oid)
    assert oid.short == oid.hex[:12]
    assert ObjectId.from_hex(oid.hex) == oid
    assert oid.short in repr(oid)
    assert len({oid, ObjectId(bytes(range(32)))}) == 1
    for bad in ["", "zz" * 32, oid.hex[:-1], oid.hex + "0"]:
        with pytest.raises(InvalidSpec):
            ObjectId.from_hex(bad)
    with pytest.raises(InvalidSpec):
        ObjectId(b"short")


def test_seal_open_round_trip_and_every_byte_is_authenticated():
    keys = Keys(os.urandom(32))
    data = b"some plaintext " * 10
    oid = keys.object_id(data)
    sealed = keys.seal(oid, data)
    assert len(sealed) == len(data) + OVERHEAD
    assert keys.open(oid, sealed) == data
    assert data not in sealed
    assert keys.seal(oid, data) != sealed  # fresh nonce every time
    for i in range(len(sealed)):
        bad = bytearray(sealed)
        bad[i] ^= 0x01
        with pytest.raises(IntegrityError) as e:
            keys.open(oid, bytes(bad))
        assert oid.short in e.value.message
        assert e.value.object == oid


def test_id_is_bound_as_associated_data():
    keys = Keys(os.urandom(32))
    a, b = b"a" * 100, b"b" * 100
    sealed_a = keys.seal(keys.object_id(a), a)
    with pytest.raises(IntegrityError):
        keys.open(keys.object_id(b), sealed_a)  # a valid object under someone else's name


def test_ids_are_keyed():
    a, b = Keys(os.urandom(32)), Keys(os.urandom(32))
    assert a.object_id(b"same") != b.object_id(b"same")
    assert a.object_id(b"same") == a.object_id(b"same")
    with pytest.raises(IntegrityError):
        b.open(a.object_id(b"x"), a.seal(a.object_id(b"x"), b"x"))


def test_keys_never_show(tmp_path: Path):
    secret = os.urandom(32)
    keys = Keys(secret)
    for text in (repr(keys), str(keys)):
        assert secret.hex() not in text
    with pytest.raises(TypeError):
        __import__("pickle").dumps(keys)
    store = Store.open(tmp_path / "s")
    key_hex = (tmp_path / "s" / "key").read_text().strip()
    assert key_hex not in repr(store) and key_hex not in repr(vars(store))


def test_key_file_is_created_0600_once(tmp_path: Path):
    path = tmp_path / "key"
    first = load_or_create_secret(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_secret(path) == first
    assert not [p for p in tmp_path.iterdir() if p.name != "key"]  # no temp file left


def test_key_file_readable_by_others_is_refused(tmp_path: Path):
    path = tmp_path / "key"
    load_or_create_secret(path)
    os.chmod(path, 0o644)
    with pytest.raises(StoreError) as e:
        load_or_create_secret(path)
    assert "chmod 600" in e.value.hint


def test_malformed_key_file_is_refused(tmp_path: Path):
    path = tmp_path / "key"
    path.write_text("not hex\n")
    os.chmod(path, 0o600)
    with pytest.raises(StoreError):
        load_or_create_secret(path)


def test_seal_into_and_check_use_caller_buffers():
    keys = Keys(os.urandom(32))
    data = os.urandom(5000)
    oid = keys.object_id(data)
    buf, scratch = bytearray(6000), bytearray(6000)
    sealed = keys.seal_into(oid, data, buf)
    assert len(sealed) == len(data) + OVERHEAD
    assert keys.open(oid, sealed) == data
    keys.check(oid, sealed, scratch)
    bad = bytearray(sealed)
    bad[-1] ^= 1
    with pytest.raises(IntegrityError):
        keys.check(oid, bytes(bad), scratch)
    with pytest.raises(ValueError):
        keys.seal_into(oid, data, bytearray(10))
