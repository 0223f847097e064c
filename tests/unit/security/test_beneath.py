"""floydd.security.beneath: descriptor-relative, no-symlink resolution, with openat2 and with
the O_NOFOLLOW walk it falls back to (forced here with the ``mode`` fixture, so both run)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from floydd.errors import UnsafePath
from floydd.security import beneath
from floydd.security.beneath import resolve


@pytest.fixture(params=["openat2", "fallback"])
def mode(request, monkeypatch):
    if request.param == "openat2":
        if not beneath.openat2_available():
            pytest.skip("this kernel has no openat2")
    else:
        monkeypatch.setattr(resolve, "_use_openat2", False)
        monkeypatch.setattr(resolve, "_openat2", _no_openat2)
    return request.param


def _no_openat2(*args, **kwargs):
    raise AssertionError("the fallback must not call openat2")


@pytest.fixture
def tree(tmp_path):
    """root/a/b/f, root/top, root/up -> .. (leaves), root/in -> a (stays), root/a/abs -> /etc;
    and a secret next to root."""
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_bytes(b"inside")
    (root / "top").write_bytes(b"top")
    (root / "up").symlink_to("..")
    (root / "in").symlink_to("a")
    (root / "a" / "abs").symlink_to("/etc")
    (tmp_path / "secret").write_bytes(b"SECRET")
    fd = beneath.open_root(root)
    yield root, fd
    os.close(fd)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_the_fallback_is_forced_where_asked(mode):
    assert beneath.openat2_available() is (mode == "openat2")


def test_opens_files_and_folders_beneath_the_root(tree, mode):
    root, fd = tree
    assert _read(beneath.open_beneath(fd, b"a/b/f")) == b"inside"
    assert _read(beneath.open_beneath(fd, "top")) == b"top"
    d = beneath.open_dir(fd, b"a/b")
    assert sorted(os.listdir(d)) == ["f"]
    os.close(d)


@pytest.mark.parametrize("rel", [b"up/secret", b"in/b/f", b"a/abs/passwd", b"up", b"in"])
def test_a_link_anywhere_on_the_path_is_refused_not_followed(tree, mode, rel):
    root, fd = tree
    with pytest.raises(OSError) as e:
        os.close(beneath.open_beneath(fd, rel))
    assert e.value.errno == errno.ELOOP


@pytest.mark.parametrize("rel", [b"../secret", b"/etc/passwd", b"a/../top", b"a//b", b"./top", b"a\0b"])
def test_dot_dot_absolute_and_odd_paths_are_refused_before_any_open(tree, mode, rel):
    _, fd = tree
    with pytest.raises(UnsafePath):
        beneath.open_beneath(fd, rel)


def test_the_root_itself_is_not_followed_unless_asked(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    with pytest.raises(OSError):
        beneath.open_root(tmp_path / "link")
    os.close(beneath.open_root(tmp_path / "link", follow=True))


def test_creating_through_a_link_is_refused(tree, mode):
    root, fd = tree
    with pytest.raises(OSError) as e:
        beneath.open_beneath(fd, b"in/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    assert e.value.errno == errno.ELOOP and not (root / "a" / "new").exists()
    new = beneath.open_beneath(fd, b"a/new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    os.close(new)
    assert stat.S_IMODE(os.stat(root / "a" / "new").st_mode) == 0o640


def test_a_folder_deeper_than_path_max_is_reached(tmp_path, mode):
    root = tmp_path / "deep"
    root.mkdir()
    fd = beneath.open_root(root)
    parts = [b"d" * 200] * 30                                  # 6 KB of path, more than PATH_MAX
    here = os.dup(fd)
    for p in parts:
        os.mkdir(p, dir_fd=here)
        nxt = os.open(p, os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
        os.close(here)
        here = nxt
    os.close(os.open(b"leaf", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here))
    os.close(here)
    leaf = beneath.open_beneath(fd, b"/".join(parts + [b"leaf"]))
    os.close(leaf)
    beneath.remove_tree(fd, parts[0])
    assert os.listdir(fd) == []
    os.close(fd)


def test_walk_yields_every_entry_through_descriptors_and_never_enters_links(tree, mode):
    root, fd = tree
    seen = {}
    for f in beneath.walk(fd):
        st = f.lstat()
        seen[f.rel] = stat.S_IFMT(st.st_mode)
        assert os.stat(f.name, dir_fd=f.dir_fd, follow_symlinks=False).st_ino == st.st_ino
    assert seen == {b"a": stat.S_IFDIR, b"a/b": stat.S_IFDIR, b"a/b/f": stat.S_IFREG, b"a/abs": stat.S_IFLNK,
                    b"top": stat.S_IFREG, b"up": stat.S_IFLNK, b"in": stat.S_IFLNK}


def test_walk_prunes_and_reports_a_folder_it_cannot_read(tree, mode, monkeypatch):
    _, fd = tree
    rels = []
    for f in beneath.walk(fd):
        rels.append(f.rel)
        if f.rel == b"a":
            f.prune()
    assert b"a/b" not in rels and b"top" in rels
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda d: (_ for _ in ()).throw(PermissionError(13, "denied"))
                        if os.fstat(d).st_ino == os.stat(tree[0] / "a").st_ino else real(d))
    errors = []
    rels = [f.rel for f in beneath.walk(fd, on_error=lambda rel, exc: errors.append((rel, exc.errno)))]
    assert errors == [(b"a", errno.EACCES)] and b"a/b" not in rels and b"in" in rels
    with pytest.raises(PermissionError):
        list(beneath.walk(fd))


def test_remove_tree_removes_links_not_their_targets_and_opens_up_read_only_folders(tmp_path, mode):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    ws = tmp_path / "ws"
    (ws / "out" / "ro" / "deeper").mkdir(parents=True)
    (ws / "out" / "ro" / "deeper" / "f").write_text("x")
    (ws / "out" / "to-outside").symlink_to(outside)
    (ws / "out" / "ro" / "file-link").symlink_to(outside / "keep")
    os.chmod(ws / "out" / "ro" / "deeper", 0o500)
    os.chmod(ws / "out" / "ro", 0o000)
    fd = beneath.open_root(ws)
    try:
        beneath.remove_tree(fd, "out")
        beneath.remove_tree(fd, "out")                      # absent: nothing to do
    finally:
        os.close(fd)
    assert not (ws / "out").exists() and (outside / "keep").read_text() == "keep"


def test_remove_tree_of_a_link_or_file_unlinks_only_it(tmp_path, mode):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "f").write_text("x")
    (tmp_path / "link").symlink_to("target")
    fd = beneath.open_root(tmp_path)
    try:
        beneath.remove_tree(fd, "link")
        with pytest.raises(UnsafePath):
            beneath.remove_tree(fd, "target/f")           # one name only: a path would be resolved
    finally:
        os.close(fd)
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "target" / "f").exists()


def test_chown_tree_changes_entries_themselves_never_link_targets(tmp_path, mode):
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root (CI runs as root)")
    (tmp_path / "outside").write_text("x")
    (tmp_path / "t" / "d").mkdir(parents=True)
    (tmp_path / "t" / "d" / "f").write_text("x")
    (tmp_path / "t" / "d" / "l").symlink_to(tmp_path / "outside")
    fd = beneath.open_root(tmp_path)
    try:
        beneath.chown_tree(fd, "t", 12345, 12346)
    finally:
        os.close(fd)
    for p in ("t", "t/d", "t/d/f", "t/d/l"):
        st = os.lstat(tmp_path / p)
        assert (st.st_uid, st.st_gid) == (12345, 12346), p
    assert os.stat(tmp_path / "outside").st_uid == 0


def test_chmod_at_changes_the_entry_and_leaves_links_alone(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    (tmp_path / "outside").write_text("x")
    os.chmod(tmp_path / "outside", 0o600)
    (tmp_path / "l").symlink_to(tmp_path / "outside")
    fd = beneath.open_root(tmp_path)
    try:
        beneath.chmod_at(fd, "f", 0o640)
        beneath.chmod_at(fd, "l", 0o777)
        real = os.chmod

        def no_nofollow(path, mode, *, dir_fd=None, follow_symlinks=True):   # an older C library
            if not follow_symlinks:
                raise NotImplementedError("chmod: follow_symlinks unavailable on this platform")
            return real(path, mode, dir_fd=dir_fd)
        monkeypatch.setattr(os, "chmod", no_nofollow)
        beneath.chmod_at(fd, "f", 0o604)
        beneath.chmod_at(fd, "l", 0o777)
    finally:
        os.close(fd)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o604
    assert stat.S_IMODE(os.stat(tmp_path / "outside").st_mode) == 0o600


@pytest.mark.parametrize("link, target, inside", [
    ("l", "a/b/f", True), ("l", "in/b", True), ("a/l", "../top", True), ("l", "missing/x", True),
    ("l", "..", False), ("l", "up/x", False), ("l", "/etc", False), ("l", "a/abs", False),
    ("a/l", "../../x", False), ("l", "in/../../x", False),
])
def test_resolves_inside_follows_links_as_the_kernel_would_and_says_if_they_leave(tree, mode, link, target, inside):
    root, fd = tree
    os.symlink(target, root / link)
    assert beneath.resolves_inside(fd, os.fsencode(link)) is inside


def test_dirs_reopens_an_evicted_folder_beneath_the_root(tmp_path, mode):
    for i in range(5):
        (tmp_path / f"d{i}" / "sub").mkdir(parents=True)
    fd = beneath.open_root(tmp_path)
    try:
        with beneath.Dirs(fd, size=2) as dirs:
            inos = {i: os.fstat(dirs.get(f"d{i}/sub".encode())).st_ino for i in range(5)}
            assert os.fstat(dirs.get(b"d0/sub")).st_ino == inos[0]
            os.rename(tmp_path / "d1", tmp_path / "gone")
            os.symlink(tmp_path / "d2", tmp_path / "d1")
            with pytest.raises(OSError) as e:
                dirs.get(b"d1/sub")
            assert e.value.errno == errno.ELOOP
    finally:
        os.close(fd)


def test_the_root_is_walked_as_opened_even_if_its_path_changes(tmp_path, mode):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine").write_text("x")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("SECRET")
    fd = beneath.open_root(tmp_path / "out")
    try:
        os.rename(tmp_path / "out", tmp_path / "moved")
        os.symlink(tmp_path / "secret", tmp_path / "out")
        assert [f.rel for f in beneath.walk(fd)] == [b"mine"]
    finally:
        os.close(fd)


def test_paths_are_plain(tmp_path: Path):
    assert beneath.split_rel(b"a/b/c") == (b"a/b", b"c") and beneath.split_rel(b"c") == (b"", b"c")
    assert beneath.join_rel(b"", b"c") == b"c" and beneath.join_rel(b"a", b"c") == b"a/c"
