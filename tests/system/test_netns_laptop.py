"""A laptop uses the lab over TLS with a personal token (issue 14), with real processes in two
namespace hosts: host 1 is a box of a cluster (``floydd init``), host 2 a laptop with no
daemon, which reaches the box only over the network.

On the laptop: ``floyd login`` with the CA fingerprint ``floydd members`` printed, then run a
job, follow its logs, fetch its output, all as the person the token names; a revoked token is
refused at the next command; a wrong fingerprint is refused before any token is sent.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.netns.fixture import netns  # noqa: F401  (the fixture, registered for this module)

pytestmark = pytest.mark.slow


def _floydd(host, state, *args, check=True, **kw):
    return host.python("-m", "floydd.cli.floydd", *args, "--state-dir", str(state), check=check, **kw)


def test_a_laptop_logs_in_runs_follows_fetches_and_is_refused_once_revoked(netns, tmp_path):
    net = netns(2)
    box, laptop = net.host(1), net.host(2)
    state = tmp_path / "box"
    addr = f"{box.ip}:7654"
    _floydd(box, state, "init", "--name", "lab", "--listen", addr, "--advertise", addr)
    daemon = box.start_floydd(state, "--node-name", "box1", "--dev-fake-gpus", "1")
    box.python("-m", "floydd.cli.floydd", "user", "--state-dir", str(state), "add", "alice")
    members = json.loads(_floydd(box, state, "members", "--json").stdout)
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
