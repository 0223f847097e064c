"""A real full disk: a small tmpfs (needs root, which CI has)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from floydd.errors import StoreFull
from floydd.store import LocalBackend, Store
from tests.integration.runtime._hostile import small_disk


@pytest.fixture
def tiny_fs(tmp_path: Path):
    with small_disk(tmp_path / "tiny", "3m") as mnt:
        yield mnt


@pytest.mark.parametrize("sync", ["batch", "object"])
def test_enospc_is_store_full_and_leaves_nothing_half_written(tmp_path: Path, tiny_fs: Path, sync: str):
    src = tmp_path / "src"
    src.mkdir()
    (src / "small").write_bytes(os.urandom(1000))
    (src / "big").write_bytes(os.urandom(8 << 20))
    root = tiny_fs / "store"
    store = Store.open(root, backend=LocalBackend(root / "objects", sync=sync))
    with pytest.raises(StoreFull) as e:
        store.snapshot(src)
    assert "no space left" in e.value.message and e.value.hint
    assert not [n for d in (root / "objects").iterdir() for n in os.listdir(d) if n.startswith(".tmp-")]
    assert store.verify().ok  # whatever was published is whole
    (src / "big").unlink()
    store.restore(store.snapshot(src), tmp_path / "out")  # the store still works once it fits
    assert (tmp_path / "out" / "small").read_bytes() == (src / "small").read_bytes()
    store.close()
