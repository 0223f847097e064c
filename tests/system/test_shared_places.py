"""Another local user against this user's daemon and ``floyd top --serve`` (real processes,
a real second user made by the test; issue 13).

- The socket folder: a state dir too deep for a socket path puts the socket in
  ``/tmp/floydd-UID-HASH``. The other user makes that folder first (0777) and listens
  there; the daemon refuses to start and ``floyd`` refuses to talk, so their listener
  receives nothing.
- ``--serve``: the other user, on the same box, is refused without the token, with a
  foreign Origin, and even with the token (had they seen the URL): on loopback the server
  answers only the user who ran it (the kernel names the other end of each connection).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from floydd.config import socket_path_for
from tests.conftest import wait_until
from tests.system.local_user import LocalUser, other_user  # noqa: F401 (fixture)
from tests.tui.test_tui_serve import Served

ROOT = Path(__file__).resolve().parents[2]

# the other user's listener: whatever reaches their socket is written to FOLDER/got
_LISTENER = """
import os, socket, sys
folder = sys.argv[1]
os.umask(0)
s = socket.socket(socket.AF_UNIX)
s.bind(folder + "/floydd.sock")
s.listen()
open(folder + "/ready", "w").close()
while True:
    c, _ = s.accept()
    with open(folder + "/got", "ab") as f:
        f.write(c.recv(65536) or b"(connected)")
    c.close()
"""


@pytest.mark.slow
def test_a_socket_folder_made_first_by_another_user_is_refused_by_daemon_and_cli(other_user: LocalUser, tmp_path):
    state = tmp_path / ("state-" + "x" * 120)
    folder = socket_path_for(state).parent
    assert folder.parent == Path("/tmp") and not folder.exists()
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    for name in ("FLOYD_HOST", "TMPDIR"):
        env.pop(name, None)
    made = other_user.run(["mkdir", "-m", "0777", str(folder)])
    assert made.returncode == 0, made.stderr
    listener = other_user.popen([shutil.which("python3") or sys.executable, "-c", _LISTENER, str(folder)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (folder / "ready").exists() or listener.poll() is not None, 30, what="their listener")
        assert listener.poll() is None

        daemon = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state),
                                 "--sandbox", "none"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert daemon.returncode != 0
        assert f"error: {folder} is owned by uid {other_user.uid}, not by uid 0 (this user); refusing" \
            in daemon.stderr, daemon.stderr
        assert "remove that folder" in daemon.stderr and "Traceback" not in daemon.stderr

        project = tmp_path / "project"
        project.mkdir()
        (project / "train.py").write_text("print('secret parameters')\n")
        init = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "init", "victim"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=60)       # local: needs no daemon
        assert init.returncode == 0, init.stderr
        for argv in (["run", "python train.py --lr 0.1"], ["status"]):
            cli = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", *argv], cwd=project, env=env,
                                 capture_output=True, text=True, timeout=60)
            assert cli.returncode != 0 and f"{folder} is owned by uid {other_user.uid}" in cli.stderr, cli.stderr
        assert not (folder / "got").exists(), (folder / "got").read_bytes()   # nothing reached them
        assert os.stat(folder).st_uid == other_user.uid                        # and their folder is as it was
    finally:
        listener.kill()
        listener.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def _curl(user: LocalUser, url: str, *headers: str, follow: bool = False) -> str:
    argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"]
    argv += ["-L", "-b", "/dev/null"] if follow else []      # follow the redirect, keeping its cookie
    for header in headers:
        argv += ["-H", header]
    return user.run([*argv, url]).stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_serve_refuses_another_local_user_even_with_the_token(other_user: LocalUser, tmp_path):
    served = Served(tmp_path)
    try:
        base, token = served.base, served.token
        wait_until(lambda: _curl(other_user, f"{base}/") not in ("", "000"), 30, what="the server to listen")
        assert _curl(other_user, f"{base}/") == "403"
        assert _curl(other_user, f"{base}/?token=guessed") == "403"
        upgrade = ("Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
        assert _curl(other_user, f"{base}/ws", *upgrade) == "403"
        assert _curl(other_user, f"{base}/ws?token={token}", *upgrade, "Origin: http://evil.example") == "403"
        assert _curl(other_user, f"{base}/?token={token}", f"Host: rebound.example:{served.port}") == "403"
        assert _curl(other_user, served.url, follow=True) == "403"              # not this user: the token is not enough
    finally:
        served.close()
