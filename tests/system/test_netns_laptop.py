"""A laptop uses the lab over TLS with a personal token (issue 14), with real processes in two
namespace hosts: host 1 is a box of a cluster (``floydd init``), host 2 a laptop with no
daemon, which reaches the box only over the network.

On the laptop: ``floyd login`` with the CA fingerprint ``floydd members`` printed, then run a
job, follow its logs, fetch its output, all as the person the token names; a revoked token is
refused at the next command; a wrong fingerprint is refused before any token is sent.

And the box is pinned, not only the CA (issue 20): with a third host as a second box that is
then removed from the lab, whoever holds its key and answers at the login address gets no
request at all, and the laptop says which box it met.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)

pytestmark = pytest.mark.slow


def test_a_laptop_logs_in_runs_follows_fetches_and_is_refused_once_revoked(netns, tmp_path):
    net = netns(2)
    box, laptop = net.host(1), net.host(2)
    state = tmp_path / "box"
    addr = f"{box.ip}:7654"
    box.floydd(state, "init", "--name", "lab", "--listen", addr, "--advertise", addr)
    daemon = box.start_floydd(state, "--node-name", "box1", "--dev-fake-gpus", "1")
    box.floydd(state, "user", "add", "alice")
    members = json.loads(box.floydd(state, "members", "--json").stdout)
    fingerprint, api = members["ca_fingerprint"], members["api"]
    assert api == f"{box.ip}:7655"
    made = json.loads(daemon.floyd("token", "create", "--for", "alice", "--label", "laptop", "--json").stdout)
    assert made["person"] == "alice"

    home = tmp_path / "laptop"
    (home / "proj").mkdir(parents=True)
    env = {"HOME": str(home), "FLOYD_CONFIG_DIR": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
           "FLOYDD_STATE_DIR": None, "FLOYD_HOST": None}

    def floyd(*args, check=True, input=None, cwd=home / "proj"):
        res = laptop.run([sys.executable, "-m", "floydd.cli.floyd", *args], check=False, env=env, cwd=cwd,
                         input=input, timeout=120)
        if check:
            assert res.returncode == 0, f"floyd {' '.join(args)}: {res.stdout}\n{res.stderr}"
        assert "Traceback" not in res.stderr
        return res

    # a wrong fingerprint: refused before the token leaves the laptop
    wrong = floyd("login", api, "--fingerprint", "sha256:" + "0" * 16, "--token-stdin", input=made["token"] + "\n",
                  check=False)
    assert wrong.returncode == 1 and "no token was sent" in wrong.stderr
    assert not (home / "config" / "login.json").exists()

    done = floyd("login", api, "--fingerprint", f"sha256:{fingerprint[:16]}", "--token-stdin",
                 input=made["token"] + "\n")
    assert f"logged in to {api} as alice" in done.stdout
    assert "alice on https://" in floyd("whoami").stdout

    (home / "proj" / "train.py").write_text(
        "import os\n"
        "for step in range(3):\n"
        "    print(f'step {step}', flush=True)\n"
        "open(os.path.join(os.environ.get('FLOYD_OUTPUT', '/output'), 'model.txt'), 'w').write('weights\\n')\n")
    floyd("init", "remote")
    run = floyd("run", "python train.py")
    assert "remote/1" in run.stdout
    logs = floyd("logs", "-f", "remote/1")                 # follows to the job's end
    assert all(f"step {i}" in logs.stdout for i in range(3))
    floyd("output", "remote/1", str(home / "got"))
    assert (home / "got" / "model.txt").read_text() == "weights\n"
    status = json.loads(floyd("status", "--json").stdout)
    job = next(j for j in status if j["id"] == "remote/1")
    assert job["user"] == "alice" and job["state"] == "success"

    # the token revoked on the box: the laptop's next command is refused, with what to do
    daemon.floyd("token", "revoke", made["id"])
    refused = floyd("status", check=False)
    assert refused.returncode == 1 and "revoked" in refused.stderr and "floyd login" in refused.stderr


# a TLS server holding a box's certificate and key that writes down every request it reads
_IMPOSTOR = """
import http.server, ssl, sys
cert, key, host, port, seen = sys.argv[1:6]

class Recorder(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(seen, "a") as f:
            f.write(f"{self.path} {self.headers.get('Authorization')}\\n")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

server = http.server.HTTPServer((host, int(port)), Recorder)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
open(seen, "a").close()
server.serve_forever()
"""


def test_a_removed_box_answering_at_the_login_address_gets_no_token(netns, tmp_path):
    net = netns(3)
    box1, laptop, box3 = net.host(1), net.host(2), net.host(3)
    s1, s3 = tmp_path / "box1", tmp_path / "box3"
    addr1, addr3 = f"{box1.ip}:7654", f"{box3.ip}:7654"
    box1.floydd(s1, "init", "--name", "lab", "--listen", addr1, "--advertise", addr1)
    daemon = box1.start_floydd(s1, "--node-name", "box1", "--dev-fake-gpus", "1")
    box1.floydd(s1, "user", "add", "alice")
    join = box1.floydd(s1, "token", "create", "--ttl", "10m").stdout.strip()
    joined = box3.floydd(s3, "join", join, "--listen", addr3, "--advertise", addr3, check=False)
    assert joined.returncode == 0, joined.stderr
    box3.start_floydd(s3, "--node-name", "box3")
    members = json.loads(box1.floydd(s1, "members", "--json").stdout)
    id3 = wait_until(lambda: next((m["id"] for m in json.loads(box1.floydd(s1, "members", "--json").stdout)
                                   ["members"] if m["name"] == "box3"), None), 60, what="box3 a member")
    token = json.loads(daemon.floyd("token", "create", "--for", "alice", "--json").stdout)["token"]

    home = tmp_path / "laptop"
    home.mkdir()
    env = {"HOME": str(home), "FLOYD_CONFIG_DIR": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
           "FLOYDD_STATE_DIR": None, "FLOYD_HOST": None}

    def floyd(*args, check=True, input=None):
        res = laptop.run([sys.executable, "-m", "floydd.cli.floyd", *args], check=False, env=env, cwd=home,
                         input=input, timeout=120)
        if check:
            assert res.returncode == 0, f"floyd {' '.join(args)}: {res.stdout}\n{res.stderr}"
        assert "Traceback" not in res.stderr
        return res

    api = members["api"]
    done = floyd("login", api, "--fingerprint", members["ca_fingerprint"], "--token-stdin", input=token + "\n")
    assert f"logged in to {api} as alice: box box1 (node {members['node_id']})" in done.stdout

    # box3 is removed from the lab; the laptop's next command learns its certificate is revoked
    removed = box1.floydd(s1, "remove", id3, "--yes", check=False)
    assert removed.returncode == 0, removed.stderr
    wait_until(lambda: id3 in json.loads((home / "config" / "login.json").read_text())["trust"]["revoked"].values()
               if floyd("whoami").returncode == 0 else False, 60, what="the laptop to learn of the removal")

    # box1 goes away and whoever holds box3's key answers at its address
    daemon.stop()
    seen = tmp_path / "seen.txt"
    impostor = box1.popen([sys.executable, "-c", _IMPOSTOR, str(s3 / "tls" / "node.pem"), str(s3 / "tls" / "node.key"),
                           box1.ip, api.rsplit(":", 1)[1], str(seen)])
    try:
        wait_until(lambda: seen.exists(), 30, what="the impostor to listen")
        refused = floyd("status", check=False)
        assert refused.returncode == 1
        assert (f"the server at {api} is not box1 (it presented box3's certificate, removed from the lab); "
                "no token was sent") in refused.stderr
        assert "floyd login again" in refused.stderr
        assert seen.read_text() == ""           # not a request, not a token
    finally:
        impostor.terminate()
        impostor.wait(10)
