"""Store key epochs (floydd.store.keys.crypto, floydd.store.keys.epochs): the seal key rotates, ids stay;
the background re-seal moves objects in place, a budget at a time, and resumes."""

from __future__ import annotations

import os
import secrets
import stat

import pytest

from floydd.errors import IntegrityError, StoreError
from floydd.store import Store
from floydd.store.keys.crypto import MAX_OVERHEAD, OVERHEAD, Keys, epoch_fingerprint, epoch_of, read_secret
from floydd.store.keys.epochs import epoch_secret, install_epoch, load_epochs, take_pending, write_pending

BASE = os.urandom(32)


def test_an_epoch_seals_anew_under_the_same_id_and_the_base_keys_alone_cannot_open_it():
    old, new = Keys(BASE), Keys(BASE, {1: os.urandom(32)})
    data = b"plaintext " * 50
    oid = old.object_id(data)
    assert new.object_id(data) == oid                    # the id key does not rotate: dedup and names stay
    sealed = new.seal(oid, data)
    assert epoch_of(sealed) == 1 and len(sealed) == len(data) + MAX_OVERHEAD
    assert new.open(oid, sealed) == data
    with pytest.raises(IntegrityError, match="key epoch 1, whose key this box does not hold"):
        old.open(oid, sealed)
    other = Keys(BASE, {1: os.urandom(32)})               # a different secret under the same number
    with pytest.raises(IntegrityError, match="failed authentication"):
        other.open(oid, sealed)
    # epoch 0 objects still open under the ring, and look exactly as before epochs existed
    sealed0 = old.seal(oid, data)
    assert epoch_of(sealed0) == 0 and len(sealed0) == len(data) + OVERHEAD and new.open(oid, sealed0) == data


def test_an_epoch_key_given_again_replaces_the_cipher_built_from_the_first():
    """Each epoch's AES-GCM is built on its first seal or open (a store that opens and seals
    nothing never loads ``cryptography``, issue 23); a key given again after that is the one used."""
    first, second = os.urandom(32), os.urandom(32)
    keys, data = Keys(BASE, {1: first}), b"data " * 20
    oid = keys.object_id(data)
    under_first = keys.seal(oid, data)                  # builds epoch 1's cipher from the first key
    keys.add_epoch(1, second)
    under_second = keys.seal(oid, data)
    assert Keys(BASE, {1: second}).open(oid, under_second) == data
    with pytest.raises(IntegrityError, match="failed authentication"):
        keys.open(oid, under_first)


def test_the_epoch_in_the_header_is_authenticated():
    ring = Keys(BASE, {1: os.urandom(32), 2: os.urandom(32)})
    data = os.urandom(1000)
    oid = ring.object_id(data)
    sealed = bytearray(ring.seal(oid, data, epoch=1))
    sealed[4] = 2                                        # name epoch 2, whose key the box holds
    with pytest.raises(IntegrityError, match="failed authentication"):
        ring.open(oid, bytes(sealed))
    scratch = bytearray(len(data))
    ring.check(oid, ring.seal(oid, data), scratch)       # check() reads epochs too
    with pytest.raises(IntegrityError):
        ring.check(oid, bytes(sealed), scratch)


def test_epoch_files_are_private_checked_against_the_fingerprint_and_never_replaced(tmp_path):
    secret = os.urandom(32)
    fp = write_pending(tmp_path, secret)
    assert take_pending(tmp_path, fp) == secret and epoch_secret(tmp_path, 3, fp) == secret
    with pytest.raises(StoreError, match="not the one the cluster recorded"):
        install_epoch(tmp_path, 3, os.urandom(32), fp)
    assert install_epoch(tmp_path, 3, secret, fp) is True
    assert take_pending(tmp_path, fp) is None             # the pending file went once installed
    assert install_epoch(tmp_path, 3, secret, fp) is False
    path = tmp_path / "keys" / "epoch-3"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and load_epochs(tmp_path) == {3: secret}
    other = os.urandom(32)
    with pytest.raises(StoreError, match="holds another secret"):
        install_epoch(tmp_path, 3, other, epoch_fingerprint(other))
    assert epoch_secret(tmp_path, 4, fp) is None


def _store_with_data(tmp_path, files=4, size=1_500_000):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(files):
        (src / f"f{i}").write_bytes(os.urandom(size))
    store = Store.open(tmp_path / "store")
    return store, store.upload(src, "ds")


def _rotate(store: Store, n: int) -> None:
    secret = secrets.token_bytes(32)
    store.add_epoch(n, secret, epoch_fingerprint(secret))


def test_the_reseal_moves_objects_a_budget_at_a_time_and_a_restart_finishes_it(tmp_path):
    store, version = _store_with_data(tmp_path)
    before = store.epoch_counts()
    total = sum(before.values())
    assert set(before) == {0} and total >= 4
    _rotate(store, 1)
    resealer = store.resealer()
    first = store.reseal_step(resealer, 1)               # a budget of one byte: one object per call
    assert first.objects == 1 and not first.lapped
    assert store.epoch_counts() == {0: total - 1, 1: 1}
    store.close()                                        # a stop mid-way: the next start goes on
    store = Store.open(tmp_path / "store")
    assert store.seal_epoch == 1                         # the epoch key is kept in keys/
    resealer = store.resealer()
    while resealer.settled_at != 1:
        store.reseal_step(resealer, 1 << 30)
    assert store.epoch_counts() == {1: total} and resealer.objects_done == total - 1
    store.restore(version.tree, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == [f"f{i}" for i in range(4)]
    assert not store.verify().damaged
    store.close()


def test_an_object_from_a_peer_under_an_older_epoch_is_kept_under_the_newest(tmp_path):
    store, _ = _store_with_data(tmp_path, files=1)
    peer = Keys(read_secret(tmp_path / "store" / "key"))    # a member that has no epoch 1 yet
    _rotate(store, 1)
    data = os.urandom(5000)
    oid = peer.object_id(data)
    store.save_sealed(oid, peer.seal(oid, data))         # the peer has not re-sealed yet: epoch 0
    assert epoch_of(store.load_sealed(oid)) == 1
    store.close()


def test_data_info_counts_a_versions_objects_by_epoch_here(tmp_path):
    store, version = _store_with_data(tmp_path, files=2)
    n = sum(store.epochs_of(version.tree).values())
    _rotate(store, 1)
    resealer = store.resealer()
    store.reseal_step(resealer, 1)
    counts = store.epochs_of(version.tree)
    assert sum(counts.values()) == n and counts.get(1, 0) >= 1
    assert store.epochs_of(Keys(BASE).object_id(b"not here")) is None
    store.close()
