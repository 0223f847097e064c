"""A real floydd daemon in a namespace host: started, used through the CLI in that host, killed."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)

pytestmark = pytest.mark.slow


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_daemon_runs_in_a_host_survives_kill9_and_restart_and_dies_with_the_network(netns, tmp_path):
    net = netns(2)
    host = net.host(2)
    daemon = host.start_floydd(tmp_path / "state", "--dev-fake-gpus", "2", "--node-name", "box2")
    first_pid = daemon.pid
    assert first_pid in net.pids(), "the daemon must live in the host's namespace"

    res = host.floydd(daemon.state, "status", "--json")
    status = json.loads(res.stdout)
    assert status["info"]["node"] == "box2" and status["info"]["pid"] == first_pid
    nodes = json.loads(daemon.floyd("nodes", "--json").stdout)
    assert [len(n["gpus"]) for n in nodes] == [2]

    assert daemon.kill9() == -9
    assert not daemon.client.ping()
    daemon.restart()
    assert daemon.pid != first_pid and daemon.client.ping()

    net.down()
    assert _dead(daemon.pid) and not daemon.client.ping()
    with pytest.raises(subprocess.CalledProcessError):
        host.run(["true"])  # the host is gone
    assert not os.path.exists(f"/run/netns/{host.ns}")
