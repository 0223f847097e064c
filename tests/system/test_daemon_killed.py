"""The daemon killed (SIGKILL) in the middle of a command: the CLI says so in one line and
exits non-zero, for each streamed command (data upload, verify, clone; logs -f).

Timing is made deterministic rather than hoped for. ``logs -f`` follows a job that prints
one line and sleeps: the kill lands after that line. The data commands draw their progress
bar on a pty while the daemon runs at a fifth of its speed (SIGSTOP/SIGCONT); it is frozen
and killed when the bar shows the first progress event (a total): the command is then
mid-stream, its work seconds from done, however fast the machine is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from tests.conftest import wait_until

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


class _Screen:
    """Everything a child writes to a pty (or pipe), collected by a thread."""

    def __init__(self, fd: int) -> None:
        self.fd, self.data = fd, b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:             # EIO: the child closed the pty
                return
            if not chunk:
                return
            self.data += chunk

    def text(self) -> str:
        """What was written, as lines of plain text (escape codes dropped)."""
        return _ANSI.sub(b"", self.data).decode(errors="replace").replace("\r", "\n")

    def close(self) -> str:
        self.thread.join(timeout=30)
        os.close(self.fd)
        return self.text()


@contextlib.contextmanager
def _slowed(pid: int, run: float = 0.01, pause: float = 0.04):
    """Let ``pid`` run ``run`` seconds in every ``run + pause``; on exit it is left stopped.
    (A duty cycle, not a wait: nothing here waits for a condition.)"""
    stop = threading.Event()

    def cycle() -> None:
        while True:
            os.kill(pid, signal.SIGSTOP)
            if stop.wait(pause):
                return                  # stopped, ready for the kill
            os.kill(pid, signal.SIGCONT)
            stop.wait(run)

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _floyd(daemon, *args: str, stderr: int) -> subprocess.Popen:
    env = {k: v for k, v in daemon.env.items() if k not in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "FORCE_COLOR")}
    env.update(TERM="xterm", NO_COLOR="1", COLUMNS="160")
    return subprocess.Popen([sys.executable, "-m", "floydd.cli.floyd", *args], env=env, cwd=daemon.project,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)


def _kill_mid_transfer(daemon, label: str, *args: str) -> tuple[int, str, str]:
    """Run ``floyd ARGS`` with its progress bar on a pty against the slowed daemon; kill the
    daemon at the first progress event. The command's exit code, stdout and (plain) stderr."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = None
    try:
        with _slowed(daemon.proc.pid):
            proc = _floyd(daemon, *args, stderr=slave)
            os.close(slave)
            screen = _Screen(master)
            wait_until(lambda: re.search(r"\d/\d", screen.text()) or proc.poll() is not None, timeout=120,
                       what=f"the first {label} progress event", details=screen.text)
        daemon.kill()                   # SIGKILL, while it is stopped mid-command
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        if daemon.proc.poll() is None:  # the test failed: a stopped daemon would not stop on SIGTERM
            daemon.kill()
        if proc is not None and proc.poll() is None:
            proc.kill()
    return proc.returncode, out, screen.close()


def _says_the_daemon_went_away(what: str, code: int, err: str) -> None:
    assert code == 1, f"{what}: exit {code}\n{err}"
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "went away in the middle of this command" in errors[0], f"{what}:\n{err}"
    assert "Traceback" not in err and "internal error" not in err, f"{what}:\n{err}"
    hints = [line for line in err.splitlines() if line.strip().startswith("hint:")]
    assert len(hints) == 1 and "floydd status" in hints[0], f"{what}:\n{err}"


def _dataset(root: Path, files: int = 16, size: int = 16 << 20) -> Path:
    root.mkdir()
    for i in range(files):
        (root / f"part-{i:02d}.bin").write_bytes(os.urandom(size))
    return root


@pytest.mark.slow
def test_data_commands_cut_short_by_a_killed_daemon_say_so(daemon, tmp_path):
    src = _dataset(tmp_path / "src")

    code, out, err = _kill_mid_transfer(daemon, "uploading", "data", "upload", str(src), "--name", "big")
    _says_the_daemon_went_away("upload", code, err)
    assert "big:1" not in out

    daemon.start()
    daemon.floyd("data", "upload", str(src), "--name", "big")    # run again, it completes
    code, out, err = _kill_mid_transfer(daemon, "verifying", "data", "verify")
    _says_the_daemon_went_away("verify", code, err)
    assert "checked" not in out

    daemon.start()
    dest = tmp_path / "clone"
    code, out, err = _kill_mid_transfer(daemon, "cloning", "data", "clone", "big", str(dest))
    _says_the_daemon_went_away("clone", code, err)
    assert "written" not in out

    daemon.start()                      # and the store is whole: verify finds nothing damaged
    assert json.loads(daemon.floyd("data", "verify", "--json").stdout)["damaged"] == []


@pytest.mark.slow
def test_logs_follow_cut_short_by_a_killed_daemon_says_so(daemon):
    job = json.loads(daemon.floyd("run", "--json", "python -c \"import time; print('ready', flush=True); "
                                                   "time.sleep(600)\"").stdout)
    proc = _floyd(daemon, "logs", "-f", job["id"], stderr=subprocess.PIPE)
    seen = _Screen(os.dup(proc.stdout.fileno()))
    try:
        wait_until(lambda: "ready" in seen.text() or proc.poll() is not None, timeout=60,
                   what="the job's first line", details=seen.text)
        daemon.kill()
        err = proc.communicate(timeout=60)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen.close() == "ready\n"    # the job's output, and nothing of the stream's framing
    _says_the_daemon_went_away("logs -f", proc.returncode, err)
    assert len(err.splitlines()) == 2, err
