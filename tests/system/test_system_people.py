"""People in a lab for real (issue 14): a root daemon in system mode, three local accounts made
for the test (alice, bob and an admin, all in the socket's group) who are the lab's people.
Alice and bob submit through the group socket; bob cannot stop or delete alice's job, clone
her private dataset or mount it, each refusal one clear error that changes nothing; the
admin can. The audit log names who did each change, ``floydd audit verify`` passes, and one
entry's bytes edited in raft.db make it fail naming that entry.

Root only (useradd, groupadd, chown), as CI runs; every account, the group, the daemon and its
jobs are gone after the test, even on failure (:mod:`tests.system.system_lab`).
"""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import subprocess
from pathlib import Path

import pytest

from floydd.agent.sandbox import probe_bwrap
from floydd.client import Client
from floydd.errors import NotFound
from tests.conftest import wait_until
from tests.system.system_lab import SystemLab, system_lab

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="system mode tests need root (useradd, chown)"),
              pytest.mark.skipif(probe_bwrap()[0] is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it)")]


@pytest.fixture
def people():
    """alice (fla...), bob (flb...) and an admin (fld...), all members of the socket's group."""
    with system_lab(members={"alice": "fla", "bob": "flb", "admin": "fld"}) as box:
        yield box


def _owned_by(lab: SystemLab, name: str, *paths: Path) -> None:
    entry = pwd.getpwnam(name)
    for path in paths:
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _project(lab: SystemLab, name: str, project: str, files: dict[str, str] | None = None) -> Path:
    folder = lab.homes[name] / project
    folder.mkdir()
    for rel, text in (files or {}).items():
        (folder / rel).write_text(text)
        _owned_by(lab, name, folder / rel)
    _owned_by(lab, name, folder)
    init = lab.floyd_as(name, "init", project, cwd=folder)
    assert init.returncode == 0, init.stderr
    return folder


def _refused(res: subprocess.CompletedProcess, *words: str) -> str:
    """The one error line of a refused command (``error: ...``, perhaps a ``hint:`` line after
    it): no traceback, an exit code that says it failed, each of ``words`` in the message."""
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("error: ")), None)
    assert at is not None, res.stderr
    error = lines[at:]
    assert len(error) == 1 or (len(error) == 2 and error[1].startswith("  hint: ")), res.stderr
    for word in words:
        assert word in error[0], res.stderr
    return error[0]


def _job_or_none(client: Client, key: str) -> dict | None:
    try:
        return client.job(key)
    except NotFound:
        return None


def test_owners_and_admins_refusals_said_and_every_change_audited_by_person(people):
    lab = people
    alice, bob, admin = lab.alice, lab.bob, lab.admin
    lab.start()
    client = Client(lab.socket, timeout=30)          # root: the daemon's own user
    for name, flags in ((alice, []), (bob, []), (admin, ["--admin"])):
        add = lab.floydd("user", "--system", "add", name, *flags)
        assert add.returncode == 0, add.stderr
    roles = {p["name"]: p["role"] for p in client.people()}
    assert (roles[alice], roles[bob], roles[admin]) == ("user", "user", "admin")

    # alice: a private dataset, and a job that runs until it is stopped
    data = lab.homes[alice] / "faces"
    data.mkdir()
    (data / "faces.txt").write_text("alice's faces\n")
    _owned_by(lab, alice, data, data / "faces.txt")
    up = lab.floyd_as(alice, "data", "upload", str(data), "--name", "faces", "--private")
    assert up.returncode == 0, up.stdout + up.stderr
    [faces] = client.datasets("faces")
    assert (faces["owner"], faces["visibility"], faces["ref"]) == (alice, "private", "faces:1")
    _project(lab, alice, "ap")
    run = lab.floyd_as(alice, "run", "sleep 600", cwd=lab.homes[alice] / "ap")
    assert run.returncode == 0 and "job ap/1 submitted" in run.stdout, run.stdout + run.stderr
    assert "started a single-node floydd" not in run.stderr              # the system daemon took it
    wait_until(lambda: client.job("ap/1")["state"] == "running", timeout=60, what="ap/1 to run")
    assert client.job("ap/1")["user"] == alice

    # bob: a job of his own, through the same socket
    bp = _project(lab, bob, "bp", {"job.sh": "echo bob was here\n"})
    mine = lab.floyd_as(bob, "run", "-f", "sh job.sh", cwd=bp)
    assert mine.returncode == 0 and "bob was here" in mine.stdout, mine.stdout + mine.stderr
    assert "started a single-node floydd" not in mine.stderr
    assert (client.job("bp/1")["user"], client.job("bp/1")["state"]) == (bob, "success")

    # bob on alice's things: refused, said in one line naming whose it is, nothing changed
    _refused(lab.floyd_as(bob, "stop", "ap/1"), f"{bob} may not stop ap/1", f"which is {alice}'s")
    _refused(lab.floyd_as(bob, "delete", "-y", "ap/1"), f"{bob} may not delete ap/1", f"which is {alice}'s")
    copy = lab.homes[bob] / "faces-copy"
    _refused(lab.floyd_as(bob, "data", "clone", "faces", str(copy)), f"{bob} may not clone faces:1",
             f"{alice}'s private dataset")
    _refused(lab.floyd_as(bob, "run", "--data", "faces:/input", "cat /input/faces.txt", cwd=bp),
             f"{bob} may not mount faces:1", f"{alice}'s private dataset")
    job = client.job("ap/1")
    assert job["state"] == "running" and not job.get("stop_requested"), job
    assert not copy.exists()
    assert [j["id"] for j in client.jobs() if j["user"] == bob] == ["bp/1"]      # no bp/2 was made

    # the admin may do all of it
    stopped = lab.floyd_as(admin, "stop", "ap/1")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    wait_until(lambda: client.job("ap/1")["state"] == "stopped", timeout=60, what="ap/1 to stop")
    deleted = lab.floyd_as(admin, "delete", "-y", "ap/1")
    assert deleted.returncode == 0 and "deleted ap/1" in deleted.stdout, deleted.stdout + deleted.stderr
    assert _job_or_none(client, "ap/1") is None
    theirs = lab.homes[admin] / "faces-copy"
    cloned = lab.floyd_as(admin, "data", "clone", "faces", str(theirs))
    assert cloned.returncode == 0, cloned.stdout + cloned.stderr
    assert (theirs / "faces.txt").read_text() == "alice's faces\n"
    assert os.stat(theirs / "faces.txt").st_uid == pwd.getpwnam(admin).pw_uid     # unpacked as them

    # the audit log: each change with the person who made it; bob's refusals made none
    listed = lab.floydd("audit", "--system", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    changes = [(e["op"], e["who"], e["what"]) for e in entries]

    def one(op: str, who: str, *words: str) -> dict:
        found = [e for e in entries if e["op"] == op and e["who"] == who and all(w in e["what"] for w in words)]
        assert len(found) == 1, (op, who, words, changes)
        return found[0]

    for name in (alice, bob, admin):
        one("person.add", "root", f"name={name}")
    one("dataset.add_version", alice, "name=faces", "visibility=private")
    one("job.submit", alice, "job=ap/1")
    one("job.submit", bob, "job=bp/1")
    one("job.update", admin, "job=ap/1", "stop_requested=")
    delete = one("job.delete", admin, "job=ap/1")
    assert [op for op, who, _ in changes if who == bob] == ["job.submit"]      # bp/1: his refusals made none
    assert not any(who == alice and op not in ("dataset.add_version", "job.submit") for op, who, _ in changes)
    assert all(e["box"] for e in entries)
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    verified = lab.floydd("audit", "--system", "verify")
    assert verified.returncode == 0 and f"{len(entries)} entries, the chain is whole" in verified.stdout, \
        verified.stdout + verified.stderr

    # someone with the disk says it was not the admin who deleted alice's job
    db = sqlite3.connect(lab.state / "cluster" / "raft.db")
    with db:
        edited = db.execute("UPDATE audit SET entry = replace(entry, ?, ?) WHERE seq = ?",
                            (f'"who":"{admin}"', '"who":"mallory"', delete["seq"])).rowcount
    db.close()
    assert edited == 1
    broken = lab.floydd("audit", "--system", "verify")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"entry {delete['seq']} (job.delete by mallory at " in broken.stderr, broken.stderr
    assert "does not match its contents" in broken.stderr and len(broken.stderr.strip().splitlines()) == 1
