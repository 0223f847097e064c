"""The operator's cluster verbs on loopback: init, token create, join, members, leave, recover."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

from floydd.client import Client
from floydd.config import socket_path_for
from tests.conftest import free_ports, wait_until
from tests.harness.processes import floydd


def _start(state, name, procs):
    log = open(state.parent / f"{name}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state),
                             "--node-name", name], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(proc)
    client = Client(socket_path_for(state))
    wait_until(lambda: client.ping() or proc.poll() is not None, timeout=30, what=f"{name} to answer")
    assert proc.poll() is None, (state.parent / f"{name}.log").read_text()[-2000:]
    return client


def test_init_token_join_members_leave(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    pa, pb, pc, api_a, api_b, api_c = free_ports(6)
    procs: list[subprocess.Popen] = []
    try:
        res = floydd("token", "create", "--state-dir", a, check=False)  # no daemon, no cluster yet
        assert res.returncode == 1 and "Traceback" not in res.stderr
        floydd("init", "--state-dir", a, "--name", "lab", "--listen", f"127.0.0.1:{pa}",
                "--advertise", f"127.0.0.1:{pa}", "--api-listen", f"127.0.0.1:{api_a}")
        again = floydd("init", "--state-dir", a, check=False)
        assert again.returncode == 1 and "already belongs to a cluster" in again.stderr
        ca = _start(a, "box-a", procs)
        token = floydd("token", "create", "--state-dir", a, "--ttl", "10m").stdout.strip()
        assert token.startswith("FLD1.") and token.endswith(f"@127.0.0.1:{pa}")
        assert oct((a / "ca" / "ca.key").stat().st_mode & 0o777) == "0o600"
        floydd("join", "--state-dir", b, token, "--listen", f"127.0.0.1:{pb}", "--advertise", f"127.0.0.1:{pb}",
                "--api-listen", f"127.0.0.1:{api_b}")
        reuse = floydd("join", "--state-dir", tmp_path / "c", token, "--listen", f"127.0.0.1:{pc}",
                        "--advertise", "127.0.0.1:1", "--api-listen", f"127.0.0.1:{api_c}", check=False)
        assert reuse.returncode == 1 and "already used" in reuse.stderr
        assert (b / "store" / "key").read_text() == (a / "store" / "key").read_text()  # one store secret
        cb = _start(b, "box-b", procs)
        both = wait_until(lambda: len((m := ca.cluster())["members"]) == 2 and m, timeout=30, what="2 members")
        assert sum(x["leader"] for x in both["members"]) == 1
        names = wait_until(lambda: sorted(n["name"] for n in cb.nodes()) == ["box-a", "box-b"], timeout=30,
                           what="box-b to list both nodes")
        assert names
        assert sorted(n["name"] for n in cb.nodes(stale=True)) == ["box-a", "box-b"]  # this node's copy
        members = json.loads(floydd("members", "--state-dir", b, "--json").stdout)
        assert members["node_id"] != both["node_id"]
        floydd("leave", "--state-dir", b, "--yes")
        wait_until(lambda: all(m["id"] != members["node_id"] for m in ca.cluster()["members"]), timeout=30,
                   what="box-b to be gone from box-a's members")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)


def test_recover_needs_confirmation_and_a_stopped_daemon(tmp_path):
    a = tmp_path / "a"
    res = floydd("recover", "--state-dir", a, check=False)
    assert res.returncode == 1 and "not part of a cluster" in res.stderr
    port, api = free_ports(2)
    floydd("init", "--state-dir", a, "--listen", f"127.0.0.1:{port}", "--advertise", f"127.0.0.1:{port}",
            "--api-listen", f"127.0.0.1:{api}")
    res = floydd("recover", "--state-dir", a, check=False)
    assert res.returncode == 1 and "--yes-i-know" in res.stderr
    floydd("recover", "--state-dir", a, "--yes-i-know")
    assert json.loads((a / "cluster.json").read_text())["pending"] == "recover"


def test_a_busy_port_at_start_is_one_line_naming_the_port_and_its_setting(tmp_path):
    a = tmp_path / "a"
    port, api = free_ports(2)
    floydd("init", "--state-dir", a, "--name", "lab", "--listen", f"127.0.0.1:{port}",
            "--advertise", f"127.0.0.1:{port}", "--api-listen", f"127.0.0.1:{api}")
    for busy, setting in ((api, "api_listen"), (port, "listen")):
        with socket.socket() as holder:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(("127.0.0.1", busy))
            holder.listen()
            res = floydd("start", "--state-dir", a, check=False)
        assert res.returncode == 1, res.stderr
        assert f"error: port {busy} ({setting} 127.0.0.1:{busy}) is already in use" in res.stderr, res.stderr
        assert "internal error" not in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert f"set {setting} to another HOST:PORT ({a / 'cluster.json'})" in res.stderr, res.stderr
    assert not Client(socket_path_for(a)).ping()


def test_offline_tools_refuse_a_damaged_database_like_the_daemon(tmp_path):
    a = tmp_path / "a"
    port, api = free_ports(2)
    floydd("init", "--state-dir", a, "--listen", f"127.0.0.1:{port}", "--advertise", f"127.0.0.1:{port}",
            "--api-listen", f"127.0.0.1:{api}")
    (a / "cluster").mkdir(parents=True, exist_ok=True)
    (a / "cluster" / "raft.db").write_bytes(b"")            # emptied: never read as a new, empty log
    res = floydd("recover", "--state-dir", a, "--yes-i-know", check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "floydd will not recover:" in res.stderr and "raft.db" in res.stderr and "floydd repair" in res.stderr
    assert json.loads((a / "cluster.json").read_text())["pending"] != "recover"

    b = tmp_path / "b"
    b.mkdir(mode=0o700)
    (b / "records.db").write_bytes(b"")
    token = "FLD1." + "0" * 64 + "." + "1" * 16 + "." + "2" * 32
    res = floydd("join", "--state-dir", b, token, "127.0.0.1:9", check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "floydd will not join:" in res.stderr and "records.db" in res.stderr, res.stderr
    assert (b / "records.db").stat().st_size == 0 and not (b / "cluster.json").exists()
