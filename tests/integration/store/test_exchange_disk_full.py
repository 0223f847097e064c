"""An import that meets a full disk (a small tmpfs: needs root, which CI has) says so, keeps nothing
half-imported, and the same file imports whole once there is room."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from floydd.errors import StoreFull
from floydd.bundle import ExportKey
from floydd.exchange.export import DatasetItem, Plan, write
from floydd.exchange.stage import LEASE, stage
from floydd.security.identity import NodeIdentity
from floydd.store import Store
from tests.integration.runtime._hostile import small_disk


@pytest.fixture
def tiny_fs(tmp_path: Path):
    with small_disk(tmp_path / "tiny", "6m") as mnt:
        yield mnt


def test_a_full_disk_imports_nothing_and_says_so(tmp_path: Path, tiny_fs: Path):
    src = tmp_path / "data"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(9 << 20))
    (src / "small.txt").write_text("labels\n")
    source = Store.open(tmp_path / "source")
    version = source.upload(src, "mnist")
    key, path = ExportKey.new(), tmp_path / "mnist.floydx"
    plan = Plan(datasets={str(version.tree): DatasetItem(ref=version.ref, name="mnist", version=1, tree=version.tree,
                                                         alone=True)})
    with open(path, "wb") as out:
        write(plan, store=source, out=out, key=key, kdf={"kind": "random"},
              identity=NodeIdentity.load_or_create(tmp_path / "tls"), exported_by="alice")

    full = Store.open(tiny_fs / "store")
    with open(path, "rb") as f, pytest.raises(StoreFull) as info:
        stage(f, key, store=full, spool=tmp_path / "spool", where="mnist.floydx")
    assert "no space left" in info.value.message and "nothing was imported" in info.value.message
    assert not any(h.startswith(LEASE) for holders in full.catalog.roots().values() for h in holders)
    assert full.catalog.list() == []

    roomy = Store.open(tmp_path / "roomy")
    with open(path, "rb") as f:
        staged = stage(f, key, store=roomy, spool=tmp_path / "spool-2", where="mnist.floydx")
    [tree] = staged.trees.values()
    roomy.restore(tree.tree, tmp_path / "out")
    assert (tmp_path / "out" / "big.bin").read_bytes() == (src / "big.bin").read_bytes()
    for store in (source, full, roomy):
        store.close()
