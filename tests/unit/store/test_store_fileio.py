"""The local backend's file I/O helpers (floydd/store/fileio.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from floydd.store import fileio


def test_fsync_dirs_syncs_every_folder_and_raises_the_first_failure_after_trying_all(tmp_path: Path,
                                                                                            monkeypatch) -> None:
    folders = [tmp_path / f"{i:02x}" for i in range(40)]
    for folder in folders:
        folder.mkdir()
    synced = []
    real = fileio.fsync_dir

    def spy(path: Path) -> None:
        real(path)                             # a missing folder raises here
        synced.append(path)

    monkeypatch.setattr(fileio, "fsync_dir", spy)
    fileio.fsync_dirs(folders)
    assert sorted(synced) == folders
    synced.clear()
    with pytest.raises(FileNotFoundError):
        fileio.fsync_dirs([folders[0], tmp_path / "gone", *folders[1:]])
    assert sorted(synced) == folders                            # the failure stopped none of the others
    fileio.fsync_dirs([])
