"""What a copy of the objects folder (without the key) gives away, and what damage does."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from floydd.errors import IntegrityError, NotFound
from floydd.store import Store
from store_testlib import flip_byte, object_files, write_tree

MARKER = "ZQXJ-plaintext-marker-7734"


def test_no_plaintext_and_no_names_at_rest(store: Store, tmp_path: Path):
    spec = {f"{MARKER}-dir/{MARKER}-{i}.txt": (MARKER * (1 + i * 50)).encode() for i in range(5)}
    spec[f"{MARKER}-big"] = (MARKER.encode() + os.urandom(64)) * 30000
    spec[f"{MARKER}-link@"] = f"{MARKER}-big"
    write_tree(tmp_path / "src", spec)
    tree = store.snapshot(tmp_path / "src")
    store.catalog.add_version("marker-test", tree, message="fine: the catalog holds names")
    needles = [MARKER.encode(), MARKER.encode("utf-16-le"), MARKER.encode().hex().encode()]
    files = list((store.root / "objects").rglob("*")) + list((store.root / "cache").rglob("*"))
    assert object_files(store.root)
    for p in files:
        assert MARKER not in p.name
        if p.is_file():
            data = p.read_bytes()
            for n in needles:
                assert n not in data, p


def _damage_setup(store: Store, tmp_path: Path):
    rnd = random.Random(5)
    write_tree(tmp_path / "a", {"big": rnd.randbytes(3 << 20), "small": b"tiny file"})
    write_tree(tmp_path / "b", {"other": rnd.randbytes(2 << 20)})
    va = store.upload(tmp_path / "a", "alpha")
    va2 = store.upload(tmp_path / "a", "alpha")  # same tree: versions share objects
    vb = store.upload(tmp_path / "b", "beta")
    return va, va2, vb


def test_every_flipped_object_is_caught_by_read_and_verify(store: Store, tmp_path: Path):
    va, va2, vb = _damage_setup(store, tmp_path)
    files = object_files(store.root)
    assert len(files) >= 5
    for path in files:
        original = path.read_bytes()
        flip_byte(path)
        store._trees.clear()
        oid_hex = path.name
        report = store.verify()
        assert not report.ok
        assert [str(d.object) for d in report.damaged] == [oid_hex]
        refs = set(report.damaged[0].versions)
        assert refs & {"alpha:1", "alpha:2", "beta:1"}, refs
        which = va if {"alpha:1", "alpha:2"} <= refs else vb
        with pytest.raises(IntegrityError) as e:
            store.restore(which.tree, tmp_path / f"out-{oid_hex[:8]}")
        assert oid_hex[:12] in e.value.message
        for ref in refs:
            assert ref in e.value.message
        assert not (tmp_path / f"out-{oid_hex[:8]}").exists()  # no wrong data left behind
        path.write_bytes(original)
    store._trees.clear()
    assert store.verify().ok


def test_verify_one_dataset_and_missing_objects(store: Store, tmp_path: Path):
    va, va2, vb = _damage_setup(store, tmp_path)
    chunk = sorted(store.read_tree(vb.tree).chunk_ids())[0]
    (store.root / "objects" / chunk.hex[:2] / chunk.hex).unlink()
    only_alpha = store.verify("alpha")
    assert only_alpha.ok
    assert only_alpha.checked_objects < store.verify().checked_objects
    report = store.verify("beta")
    assert [(d.object, d.versions) for d in report.damaged] == [(chunk, ("beta:1",))]
    assert "not in the store" in report.damaged[0].error
    oid, refs = report.damaged[0]
    assert refs == ["beta:1"]
    d = report.to_dict()
    assert d["ok"] is False and d["damaged"][0]["object"] == chunk.hex and d["damaged"][0]["versions"] == ["beta:1"]
    with pytest.raises(NotFound):
        store.restore(vb.tree, tmp_path / "out")


def test_verify_progress_reaches_total(store: Store, tmp_path: Path):
    _damage_setup(store, tmp_path)
    calls = []
    report = store.verify(progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (report.checked_bytes, report.checked_bytes)
    assert report.checked_bytes == sum(p.stat().st_size for p in object_files(store.root))
