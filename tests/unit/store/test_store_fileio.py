"""The local backend's file I/O helpers (floydd/store/fileio.py)."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 100_000, (4 << 20) + 123])
@pytest.mark.parametrize("in_place", [True, False])
def test_a_direct_write_keeps_exactly_the_bytes_and_reads_back_what_the_file_holds(tmp_path: Path, size: int,
                                                                                    in_place: bool) -> None:
    data = os.urandom(size)
    if in_place:                                # a writer's sealed object: the start of an aligned buffer
        buf = fileio.aligned_buffer(size + fileio.ALIGN)
        buf[:size] = data
        buf[size:] = b"\xff" * (len(buf) - size)     # padding that must not reach the file
        source = memoryview(buf)[:size]
    else:
        source = data                           # bytes from elsewhere: copied into an aligned buffer
    path = tmp_path / "object"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
    except OSError as exc:
        pytest.fail(f"the test's filesystem takes no direct I/O ({exc}): these tests need one that does")
    try:
        fileio.write_direct(fd, source)
        assert bytes(fileio.read_back_direct(fd, size)) == data
    finally:
        os.close(fd)
    assert path.read_bytes() == data
    with open(path, "ab") as f:
        f.write(b"!")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        assert bytes(fileio.read_back_direct(fd, size)) == data + b"!"      # one more than expected shows
    finally:
        os.close(fd)
