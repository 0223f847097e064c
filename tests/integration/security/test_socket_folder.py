"""The socket folder under the temp dir, with a real daemon and the real ``floyd`` CLI.

A state dir too deep for a socket path puts the socket in ``TMP/floydd-UID-HASH``; each
test gets its own sticky, world-writable temp dir (``TMPDIR``) standing in for /tmp.
Another user's folder needs root to fake: that case is in
tests/system/test_shared_places.py, with a real second user.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from floydd.errors import FloyddError
from floydd.security.owned_dirs import UNSAFE_FOLDER
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """(env for child processes, deep state dir, the socket folder they will agree on)."""
    tmp = Path(tempfile.mkdtemp(prefix="fl", dir="/tmp"))   # short: the socket path must fit
    os.chmod(tmp, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    state = tmp_path / ("state-" + "x" * 120)
    env = {**os.environ, "TMPDIR": str(tmp), "FLOYDD_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    env.pop("FLOYD_HOST", None)
    yield env, state, socket_path_for(state).parent
    shutil.rmtree(tmp, ignore_errors=True)


def _start(env: dict, state: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state),
                             "--sandbox", "none"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _refused(env: dict, state: Path) -> str:
    """Start a daemon that must refuse to start: its whole output, once it has exited."""
    proc = _start(env, state)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode != 0, out
    return out


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.terminate()
    out, _ = proc.communicate(timeout=20)
    return out


def test_the_daemon_makes_the_folder_0700_and_clients_use_it(shared):
    env, state, folder = shared
    proc = _start(env, state)
    try:
        client = Client(socket_path_for(state))
        wait_until(lambda: proc.poll() is not None or client.ping(), 30, what="the daemon to answer")
        assert proc.poll() is None, _stop(proc)
        st = os.lstat(folder)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        out = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "status"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
    finally:
        _stop(proc)
    assert not (folder / "floydd.sock").exists()


@pytest.mark.parametrize("plant", ["group-writable", "symlink"])
def test_a_planted_folder_is_refused_by_the_daemon_and_the_cli(shared, tmp_path, plant):
    env, state, folder = shared
    if plant == "group-writable":
        folder.mkdir()
        os.chmod(folder, 0o770)
        expected = "has mode 0770"
    else:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        folder.symlink_to(elsewhere)
        expected = "is a symbolic link"
    out = _refused(env, state)
    assert f"error: {folder} {expected}" in out and "refusing to use it" in out, out
    assert "hint:" in out and "remove that folder" in out and "shorter state dir" in out
    assert "Traceback" not in out
    assert not list(Path(state).glob("records.db*"))          # refused before anything started

    cli = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "status"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert cli.returncode != 0 and f"error: {folder} {expected}" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr
    with pytest.raises(FloyddError) as err:     # the library too, not only the CLI
        Client(socket_path_for(state)).ping()
    assert err.value.code == UNSAFE_FOLDER


def test_a_missing_folder_is_just_no_daemon(shared):
    _, state, folder = shared
    assert not folder.exists()
    assert Client(socket_path_for(state)).ping() is False


def test_the_autostart_log_is_never_written_through_a_link(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (state / "floydd.log").symlink_to(victim)
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    env.pop("FLOYD_HOST", None)
    cli = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "status"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert cli.returncode != 0 and "floydd.log is a symbolic link; refusing to use it" in cli.stderr, cli.stderr
    assert victim.read_text() == "keep\n"
    assert not (state / "floydd.lock").exists()               # no daemon was started


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (state / "floydd.lock").symlink_to(victim)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = _refused(env, state)
    assert "floydd.lock is a symbolic link; refusing to use it" in out, out
    assert victim.read_text() == "keep\n"


@pytest.mark.parametrize("command", [["init", "--name", "lab"], ["join", "FLD1." + "0" * 64 + "." + "1" * 16 + "." + "2" * 32,
                                                                 "127.0.0.1:9"]])
def test_init_and_join_refuse_a_state_folder_another_user_made(tmp_path, command):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder to another uid")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 54321, 54321)
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", *command, "--state-dir", str(state)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "owned by uid 54321" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert list(state.iterdir()) == [], "nothing was written into it"
