"""Folders and files in shared places: the rules (pure) and the checks on real folders."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from floydd.config import socket_path_for
from floydd.errors import FloyddError
from floydd.security.owned_dirs import (UNSAFE_FOLDER, check_owned_dir, claim_state_dir, ensure_owned_dir,
                                        folder_problem, is_shared_socket, open_private_file)

ME = os.geteuid()
OTHER = 65534 if ME != 65534 else 65533


def _st(mode: int, uid: int = ME) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize("st, expected", [
    (_st(stat.S_IFDIR | 0o700), None),
    (_st(stat.S_IFDIR | 0o777), "has mode 0777"),
    (_st(stat.S_IFDIR | 0o770), "has mode 0770"),
    (_st(stat.S_IFDIR | 0o701), "has mode 0701"),
    (_st(stat.S_IFDIR | 0o700, uid=OTHER), f"owned by uid {OTHER}"),
    (_st(stat.S_IFLNK | 0o777), "symbolic link"),
    (_st(stat.S_IFREG | 0o600), "not a folder"),
])
def test_folder_rules(st, expected):
    problem = folder_problem(st, ME)
    assert (problem is None) if expected is None else (expected in problem)


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch) -> Path:
    """A sticky, world-writable temp dir standing in for /tmp."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _deep(tmp_path: Path) -> Path:
    return tmp_path / ("state-" + "x" * 120)


def test_a_deep_state_dir_puts_its_socket_in_a_shared_folder(tmp_path, shared_tmp):
    sock = socket_path_for(_deep(tmp_path))
    assert sock.parent.parent == shared_tmp and is_shared_socket(sock)
    assert not is_shared_socket(socket_path_for(tmp_path))
    assert not is_shared_socket(shared_tmp / "someone-else" / "floydd.sock")


def test_a_fresh_folder_is_made_owner_only(shared_tmp):
    old = os.umask(0)                   # even a permissive umask gives 0700
    try:
        folder = ensure_owned_dir(shared_tmp / "floydd-1-abc")
    finally:
        os.umask(old)
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == ME
    assert ensure_owned_dir(folder) == folder      # ours already: accepted as is


def _refused(fn, *args, **kw) -> FloyddError:
    with pytest.raises(FloyddError) as err:
        fn(*args, **kw)
    assert err.value.code == UNSAFE_FOLDER
    return err.value


def test_a_group_writable_folder_is_refused_not_repaired(shared_tmp):
    folder = shared_tmp / "f"
    folder.mkdir()
    os.chmod(folder, 0o770)
    err = _refused(ensure_owned_dir, folder, hint="remove it")
    assert "has mode 0770" in err.message and err.hint == "remove it"
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o770


def test_a_symlink_is_refused_even_to_a_folder_of_ours(shared_tmp, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = shared_tmp / "f"
    link.symlink_to(mine)
    assert "symbolic link" in _refused(ensure_owned_dir, link).message
    assert "symbolic link" in _refused(check_owned_dir, link).message


@pytest.mark.skipif(ME != 0, reason="giving a folder to another uid needs root")
def test_a_folder_in_a_non_sticky_world_writable_place_is_refused(tmp_path):
    place = tmp_path / "open"         # someone else's 0777 folder: they could rename ours away
    place.mkdir()
    os.chmod(place, 0o777)
    os.chown(place, OTHER, OTHER)
    (place / "f").mkdir(mode=0o700)
    assert "not sticky" in _refused(check_owned_dir, place / "f").message


@pytest.mark.skipif(ME != 0, reason="giving a folder to another uid needs root (the rule itself: test_folder_rules)")
def test_a_folder_made_0777_by_another_uid_is_refused(shared_tmp):
    folder = shared_tmp / "f"
    folder.mkdir()
    os.chmod(folder, 0o777)
    os.chown(folder, OTHER, OTHER)
    err = _refused(ensure_owned_dir, folder)
    assert f"owned by uid {OTHER}" in err.message and "remove" in err.hint
    os.chmod(folder, 0o700)             # tight, but still someone else's
    assert f"owned by uid {OTHER}" in _refused(check_owned_dir, folder).message


@pytest.mark.skipif(ME != 0, reason="giving a folder to another uid needs root")
def test_a_state_dir_made_by_another_user_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o777)
    os.chown(state, OTHER, OTHER)
    err = _refused(claim_state_dir, state)
    assert f"owned by uid {OTHER}" in err.message and "state dir of your own" in err.hint
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o777      # not taken over


def test_our_own_state_dir_is_tightened_and_may_be_a_link(tmp_path):
    state = tmp_path / "big-disk"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    link = tmp_path / "state"
    link.symlink_to(state)
    claim_state_dir(link)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    fresh = claim_state_dir(tmp_path / "a" / "b")
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700


def test_private_files_are_never_opened_through_a_link(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep\n")
    log = tmp_path / "floydd.log"
    log.symlink_to(target)
    err = _refused(open_private_file, log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert "symbolic link" in err.message
    assert target.read_text() == "keep\n"
    open_ = tmp_path / "open.log"
    open_.write_text("")
    os.chmod(open_, 0o666)
    assert "other users can write" in _refused(open_private_file, open_, os.O_WRONLY).message
    fd = open_private_file(tmp_path / "new.log", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    assert stat.S_IMODE(os.stat(tmp_path / "new.log").st_mode) & 0o077 == 0
