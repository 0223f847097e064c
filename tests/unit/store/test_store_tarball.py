"""Folders as tar streams (floyd over FLOYD_HOST): what goes in, and what an archive may not do."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from floydd.errors import InvalidSpec, UnsafePath, UserError
from floydd.store.tarball import MAX_DEPTH, pack, unpack


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def test_a_packed_folder_unpacks_to_the_same_files_minus_ignored_ones_and_links(tmp_path):
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print(1)\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    (src / "pkg" / "mod.py").write_bytes(os.urandom(3000))
    (src / "big.ckpt").write_bytes(b"0" * 10)
    (src / ".floydignore").write_text("*.ckpt\n")
    (src / "link.py").symlink_to(src / "train.py")
    buf = io.BytesIO()
    files, size = pack(src, buf)
    assert files == 4                                   # train.py, run.sh, pkg/mod.py, .floydignore
    buf.seek(0)
    dest = tmp_path / "dest"
    dest.mkdir()
    got = unpack(buf, dest)
    assert (got.files, got.bytes, got.skipped) == (4, size, 0)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == \
        [".floydignore", "pkg/mod.py", "run.sh", "train.py"]
    assert (dest / "pkg" / "mod.py").read_bytes() == (src / "pkg" / "mod.py").read_bytes()
    assert os.stat(dest / "run.sh").st_mode & 0o100 and not os.stat(dest / "train.py").st_mode & 0o177


def test_pack_refuses_a_folder_over_the_limit_before_sending_it_all(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"0" * 600)
    (tmp_path / "b.bin").write_bytes(b"0" * 600)
    with pytest.raises(UserError) as exc:
        pack(tmp_path, io.BytesIO(), limit=1000)
    assert exc.value.code == "code_too_large" and "floyd data upload" in exc.value.hint


@pytest.mark.parametrize("name", ["../evil.py", "/etc/passwd", "a/../../evil", "a/b/../../../evil", "a\\..\\b"])
def test_paths_outside_the_folder_are_refused_and_nothing_lands_outside(tmp_path, name):
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafePath):
        unpack(_tar(_file("fine.py"), _file(name)), dest)
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "evil").exists()


def test_links_devices_and_fifos_are_skipped_not_made(tmp_path):
    link = tarfile.TarInfo("escape")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc"
    hard = tarfile.TarInfo("hard")
    hard.type, hard.linkname = tarfile.LNKTYPE, "/etc/passwd"
    fifo = tarfile.TarInfo("fifo")
    fifo.type = tarfile.FIFOTYPE
    dest = tmp_path / "dest"
    dest.mkdir()
    got = unpack(_tar((link, None), (hard, None), (fifo, None), _file("escape/x.py")), dest)
    assert got.skipped == 3 and got.files == 1
    assert (dest / "escape").is_dir() and not (dest / "escape").is_symlink()
    assert sorted(p.name for p in dest.iterdir()) == ["escape"]


def test_an_archive_over_the_limit_stops_before_writing_past_it(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UserError) as exc:
        unpack(_tar(_file("a", b"1" * 600), _file("b", b"2" * 600)), dest, limit=1000)
    assert exc.value.code == "code_too_large" and not (dest / "b").exists()


def test_a_name_twice_or_not_a_tar_is_a_clear_error(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafePath, match="twice"):
        unpack(_tar(_file("a.py"), _file("./a.py")), dest)
    with pytest.raises(InvalidSpec, match="not a readable tar"):
        unpack(io.BytesIO(b"certainly not a tar archive" * 40), tmp_path / "other")


def test_a_full_disk_while_unpacking_is_a_clear_store_full_error(tmp_path, monkeypatch):
    import errno

    from floydd.errors import StoreFull
    real_open = os.open

    def full(path, flags, mode=0o777, **kw):
        if str(path).endswith("big.bin"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode, **kw)
    monkeypatch.setattr(os, "open", full)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(StoreFull, match="no space left"):
        unpack(_tar(_file("big.bin", b"1" * 100)), dest)


@pytest.mark.parametrize("name, said", [
    ("n" * 256, "too long"),                                    # a name past 255 bytes
    ("é" * 128, "too long"),                                    # 256 bytes in UTF-8
    ("a/" * 2100 + "f", "too long"),                            # a path past 4096 bytes
    ("a/" * MAX_DEPTH + "f", f"{MAX_DEPTH + 1} folders deep"),  # deeper than the tools that walk trees can follow
])
def test_names_a_tree_cannot_hold_are_refused_before_anything_is_made(tmp_path, name, said):
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafePath, match=said):
        unpack(_tar(_file(name)), dest)
    assert not any(dest.iterdir())


def test_a_path_past_what_the_file_system_takes_is_an_unsafe_path_not_a_crash(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    name = "/".join(["n" * 255] * 15 + ["f" * 230])           # 4070 bytes: a tree may hold it, this folder not
    with pytest.raises(UnsafePath, match="too long for this box's file system"):
        unpack(_tar(_file(name)), dest)


def test_a_name_that_is_both_a_file_and_a_folder_is_refused(tmp_path):
    for n, members in enumerate([(_file("a"), _file("a/b")), (_file("a"), (_dir("a"), None)),
                                 (_file("a/b"), _file("a"))]):
        dest = tmp_path / str(n)
        dest.mkdir()
        with pytest.raises(UnsafePath, match="as a file and as a folder|twice"):
            unpack(_tar(*members), dest)


def test_the_deepest_and_longest_allowed_names_unpack(tmp_path):
    deep = "/".join(["d"] * (MAX_DEPTH - 1)) + "/f"
    dest = tmp_path / "dest"
    dest.mkdir()
    got = unpack(_tar(_file(deep, b"deep"), _file("n" * 255, b"long"), (_dir("x/y"), None)), dest)
    assert got.files == 2 and (dest / deep).read_bytes() == b"deep" and (dest / ("n" * 255)).read_bytes() == b"long"
    assert (dest / "x" / "y").is_dir()


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info
