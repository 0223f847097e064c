"""People, roles and ownership through a real daemon's unix socket (floydd.cluster.state.people,
floydd.api.request.acting_person): the caller's uid (SO_PEERCRED) is mapped to a person.

One OS user runs the tests, so the test changes *which person its uid maps to*: an admin on
another box would do the same, and the test proposes those changes straight into the daemon's
cluster (as the admin ``root``-or-whoever made the lab), while every request it checks goes
through the socket as a client would send it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from aiohttp import web
from click.testing import CliRunner

from floydd.api import keys
from floydd.cli.floyd import cli as floyd
from floydd.cli.floydd import cli as floydd
from floydd.client import Client
from floydd.config import preset_for_tests
from floydd.daemon.app import create_app
from floydd.errors import Forbidden
from tests.harness.inprocess import serve_on

ME = pwd.getpwuid(os.getuid()).pw_name
UID = os.getuid()


@contextmanager
def serve_unix(app: web.Application, path: Path) -> Iterator[tuple[Client, asyncio.AbstractEventLoop]]:
    """``app`` on a unix socket at ``path`` (run_app in a thread); a real client and the loop."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    client = Client(path, timeout=60)
    with serve_on(app, sock, client.ping, name="people-floydd") as loop:
        yield client, loop


@pytest.fixture
def lab(tmp_path):
    config = preset_for_tests(tmp_path / "state", dev_fake_gpus="1", sandbox="none")
    app = create_app(config)
    config.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with serve_unix(app, config.socket_path) as (client, loop):
        cluster = app[keys.CLUSTER]

        def admin(op: str, **fields):
            """What an admin (the lab's first person, ME) says from elsewhere."""
            cmd = {"op": op, "user": ME, **fields}
            return asyncio.run_coroutine_threadsafe(cluster.change_account(cmd), loop).result(30)
        yield client, admin, cluster.node_id, tmp_path
        if config.socket_path.exists():
            config.socket_path.unlink()


def _job(client: Client, folder: Path, command: str, data=()) -> str:
    return client.submit({"project": "lab", "command": command, "code_path": str(folder), "data": list(data)})["id"]


def _upload(client: Client, folder: Path, name: str, private=False) -> dict:
    events = list(client.upload(folder, name, visibility="private" if private else None))
    assert "result" in events[-1], events[-1]
    return events[-1]["result"]


def test_a_lab_of_one_needs_no_account_and_its_first_add_makes_its_user_admin(lab):
    client, _admin, node, tmp = lab
    assert client.people() == []
    tmp.joinpath("code").mkdir()
    job = _job(client, tmp / "code", "true")
    assert client.job(job)["user"] == ME                    # the lone box's user, no account needed
    assert client.add_person("bob")["role"] == "user"
    assert {p["name"]: p["role"] for p in client.people()} == {ME: "admin", "bob": "user"}
    with pytest.raises(Exception, match="last admin"):
        client.set_role(ME, "user")
    client.set_role("bob", "admin")
    client.remove_person("bob")
    assert [p["name"] for p in client.people()] == [ME]


def test_owners_admins_and_callers_without_an_account(lab, caplog):
    client, admin, node, tmp = lab
    code, data = tmp / "code", tmp / "data"
    code.mkdir()
    data.mkdir()
    (data / "faces.txt").write_text("x\n")
    client.add_person("alice", uids={node: [UID]})           # ME (the lab of one) becomes admin; we act as alice
    assert {p["name"]: p["role"] for p in client.people()} == {ME: "admin", "alice": "user"}
    running = _job(client, code, "sleep 60")
    done = _job(client, code, "true")
    version = _upload(client, data, "faces", private=True)
    assert (version["owner"], version["visibility"]) == ("alice", "private")
    info = client.dataset("faces")
    assert (info["owner"], info["visibility"]) == ("alice", "private")
    with pytest.raises(Forbidden, match="user alice may not add carol: not an admin"):
        client.add_person("carol")
    client.wait(done, timeout=60)

    admin("person.map", name="alice", node=node, uids=[])       # our uid is bob's now
    admin("person.add", name="bob", role="user", uids={node: [UID]})
    for attempt, words in ((lambda: client.stop(running), f"user bob may not stop {running}, which is alice's"),
                           (lambda: client.delete(done), f"user bob may not delete {done}, which is alice's"),
                           (lambda: client.restart(done, {}), f"bob may not restart {done}, which is alice's"),
                           (lambda: list(client.clone("faces", tmp / "copy")), "bob may not clone faces:1: it is "
                                                                                "alice's private dataset"),
                           (lambda: _job(client, code, "true", ["faces:/input"]), "bob may not mount faces:1"),
                           (lambda: client.check_job({"project": "lab", "command": "true", "data": ["faces:/input"]}),
                            "bob may not mount faces:1"),
                           (lambda: client.dataset("faces"), "user bob may not list the files of faces:1"),
                           (lambda: _upload(client, data, "faces"), "alice's private dataset")):
        with pytest.raises(Forbidden) as info, caplog.at_level(logging.WARNING, logger="floydd.api"):
            attempt()
        assert words in str(info.value) and "\n" not in str(info.value)
        said = [r.getMessage() for r in caplog.records if r.name == "floydd.api"]   # the daemon's log says who tried
        assert said and said[-1].startswith("refused ") and f"from {ME}: " in said[-1] and words in said[-1]
    assert {j["id"] for j in client.jobs()} >= {running, done}     # everyone sees every job
    assert client.job(running)["state"] in ("starting", "running")

    admin("person.map", name="bob", node=node, uids=[])         # back to our login name: the admin
    client.stop(running)
    events = list(client.clone("faces", tmp / "copy"))
    assert "result" in events[-1] and (tmp / "copy" / "faces.txt").read_text() == "x\n"
    client.delete(done)

    admin("person.map", name=ME, node=node, uids=[UID + 1])     # now nobody: changes are refused
    with pytest.raises(Forbidden) as info:
        _job(client, code, "true")
    assert str(info.value) == f"uid {UID} ({ME}) has no account in this lab; an admin runs floydd user add {ME}"
    assert info.value.code == "no_account"
    assert client.jobs() and client.people()                     # reads stay open
    assert client.datasets("faces") == []                        # but not to alice's private dataset (issue 20)


def test_the_cli_adds_lists_changes_and_removes_people_with_clear_errors(lab, monkeypatch):
    client, _admin, node, tmp = lab
    state = ["--state-dir", str(tmp / "state")]
    runner = CliRunner()

    def run(cli, *args):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    assert "no accounts: a lab of one" in run(floydd, "user", *state, "list").output
    added = run(floydd, "user", *state, "add", "bob", "--uid", f"{node}:4242")
    box = _node_name(client, node)
    assert added.exit_code == 0 and f"bob added as a user; uid 4242 on {box}\n" in added.output
    bad = run(floydd, "user", *state, "add", "eve", "--uid", "nobox")
    assert bad.exit_code != 0 and "--uid 'nobox' is not BOX:UID" in bad.output
    carol = run(floydd, "user", *state, "add", "carol").output
    assert f"carol added as a user; their login name acts as them on {box}\n" in carol    # the box it ran through
    assert "floydd user map carol BOX" in carol
    assert "on every box (any box" in run(floydd, "user", *state, "map", "carol", "--every-box").output
    gone = run(floydd, "user", *state, "unmap", "carol", box)
    assert gone.exit_code == 0 and f"carol is signed out of {box}; their login name acts as them on every box" \
        in gone.output
    nowhere = run(floydd, "user", *state, "unmap", "carol", "--every-box").output
    assert "no box acts for them (floydd user map NAME BOX signs them in)" in nowhere
    assert "bob removed" not in run(floydd, "user", *state, "remove", "carol").output
    listed = run(floydd, "user", *state, "list").output.splitlines()
    assert listed[0].split() == ["NAME", "ROLE", "UIDS", "LOGIN", "ON"]
    rows = {line.split()[0]: line.split()[1:] for line in listed[2:]}
    assert rows == {"bob": ["user", f"{box}:4242", "-"], ME: ["admin", "-", box]}
    as_json = json.loads(run(floydd, "user", *state, "list", "--json").output)
    assert {p["name"]: p["uids"] for p in as_json} == {"bob": {node: [4242]}, ME: {}}
    demote = run(floydd, "user", *state, "role", ME, "user")
    assert demote.exit_code != 0 and f"{ME} is the lab's last admin" in demote.output
    assert "Traceback" not in demote.output
    unknown = run(floydd, "user", *state, "remove", "zed")
    assert unknown.exit_code != 0 and "zed has no account in this lab" in unknown.output
    assert "bob is now an admin" in run(floydd, "user", *state, "role", "bob", "admin").output
    assert "bob removed" in run(floydd, "user", *state, "remove", "bob").output
    assert [p["name"] for p in client.people()] == [ME]

    monkeypatch.setenv("FLOYDD_STATE_DIR", str(tmp / "state"))
    data = tmp / "data"
    data.mkdir()
    (data / "a.txt").write_text("a\n")
    assert run(floyd, "data", "upload", str(data), "--name", "secret", "--private").exit_code == 0
    info = run(floyd, "data", "info", "secret").output
    assert f"owner    {ME} (private: only the owner and admins" in info
    assert run(floyd, "data", "upload", str(data), "--name", "open").exit_code == 0
    assert f"owner    {ME} (lab: everyone" in run(floyd, "data", "info", "open").output
    assert run(floyd, "data", "upload", str(data), "--name", "secret", "--lab").exit_code == 0
    assert f"owner    {ME} (lab: everyone" in run(floyd, "data", "info", "secret").output


def _node_name(client: Client, node: str) -> str:
    return next(n["name"] for n in client.nodes() if n["id"] == node)
