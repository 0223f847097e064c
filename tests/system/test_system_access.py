"""Every road to another person's data, for real (issue 20): a root daemon in system mode,
three local accounts made for the test (alice, bob and an admin, in the socket's group) who
are the lab's people, each using ``floyd`` through the group socket as they would.

alice keeps a private dataset ``faces``, a lab dataset ``mnist`` and a job ``ap/1`` whose
code holds a secret and whose output is a copy of it. bob then tries every road there is to
them: ``floyd data info`` and ``clone``, a mount, ``PROJECT/N/output`` as data and as a
mount, ``floyd output``, ``floyd clone``, a version of alice's ``mnist``, a delete, an
export, the store's gc and repair, and a raw submit naming her tree id as ``code_tree``. Each
is refused with one clear line and changes nothing; the logs stay the lab's (the default
``job_logs``); the admin, and alice for her own, get through.

Root only (useradd, groupadd, chown), as CI runs; every account, the group, the daemon and its
jobs are gone after the test, even on failure (:mod:`tests.system.system_lab`).
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from floydd.agent.sandbox import probe_bwrap
from floydd.client import Client
from tests.system.system_lab import SystemLab, system_lab

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="system mode tests need root (useradd, chown)"),
              pytest.mark.skipif(probe_bwrap()[0] is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it)")]

SECRET = "password: alice-secret-7f3a\n"


@pytest.fixture
def people():
    with system_lab(members={"alice": "fla", "bob": "flb", "admin": "fld"}) as box:
        yield box


def _owned(lab: SystemLab, name: str, *paths: Path) -> None:
    entry = pwd.getpwnam(name)
    for path in paths:
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _folder(lab: SystemLab, name: str, folder: str, files: dict[str, str]) -> Path:
    path = lab.homes[name] / folder
    path.mkdir()
    for rel, text in files.items():
        (path / rel).write_text(text)
        _owned(lab, name, path / rel)
    _owned(lab, name, path)
    return path


def _ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _refused(res: subprocess.CompletedProcess, *words: str) -> str:
    """The one error line of a refused command (and perhaps its hint): no traceback, a failing
    exit code, each of ``words`` in the message."""
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


def test_bob_is_refused_on_every_road_to_alices_data_code_and_output(people):
    lab = people
    alice, bob, admin = lab.alice, lab.bob, lab.admin
    lab.start()
    client = Client(lab.socket, timeout=30)          # root: the daemon's own user
    for name, flags in ((alice, []), (bob, []), (admin, ["--admin"])):
        _ok(lab.floydd("user", "--system", "add", name, *flags))

    # alice's things
    faces = _folder(lab, alice, "faces", {"faces.txt": "alice's faces\n"})
    _ok(lab.floyd_as(alice, "data", "upload", str(faces), "--name", "faces", "--private"))
    mnist = _folder(lab, alice, "mnist", {"labels.csv": "1,2,3\n"})
    _ok(lab.floyd_as(alice, "data", "upload", str(mnist), "--name", "mnist"))
    ap = _folder(lab, alice, "ap", {"config.yaml": SECRET})
    _ok(lab.floyd_as(alice, "init", "ap", cwd=ap))
    ran = lab.floyd_as(alice, "run", "-f", "cp config.yaml /output/model.txt && echo copied", cwd=ap)
    assert ran.returncode == 0 and "copied" in ran.stdout, ran.stdout + ran.stderr
    job = client.job("ap/1")
    assert (job["user"], job["state"], job["output_version"]) == (alice, "success", "ap/1/output:1")
    trees = {v["ref"]: v["tree"] for v in client.datasets()}     # root sees them all (its lab, its box)

    # bob, through the same socket
    bp = _folder(lab, bob, "bp", {"run.sh": "cat /in/* || true\n"})
    _ok(lab.floyd_as(bob, "init", "bp", cwd=bp))
    poison = _folder(lab, bob, "poison", {"labels.csv": "9,9,9\n"})
    out = lab.homes[bob] / "got"
    private, output = f"{alice}'s private dataset", f"the output of {alice}'s job ap/1"
    for args, words in (
            (("data", "info", "faces"), ("may not list the files of faces:1", private)),
            (("data", "clone", "faces", str(out)), ("may not clone faces:1", private)),
            (("run", "--data", "faces:/in", "sh run.sh"), ("may not mount faces:1", private)),
            (("data", "info", "ap/1/output"), ("may not list the files of ap/1/output:1", output)),
            (("data", "clone", "ap/1/output", str(out)), ("may not clone ap/1/output:1", output)),
            (("run", "--data", "ap/1/output:/in", "sh run.sh"), ("may not mount ap/1/output:1", output)),
            (("output", "ap/1", str(out)), ("may not clone ap/1/output:1", output)),
            (("clone", "ap/1", str(out)), ("may not clone the code of ap/1", f"which is {alice}'s")),
            (("data", "upload", str(poison), "--name", "mnist"), ("may not add a version to mnist",
                                                                  f"{alice}'s dataset")),
            (("data", "delete", "-y", "mnist"), ("may not delete mnist",)),
            (("data", "delete", "-y", "ap/1/output"), ("may not delete ap/1/output", output)),
            (("export", "ap/1", "--to", str(lab.homes[bob] / "ap.fx"), "--key-file", str(lab.homes[bob] / "k")),
             ("may not export the code of ap/1",)),
            (("data", "gc"), ("may not collect this box's store's garbage", "an admin's")),
            (("data", "verify", "--repair"), ("may not verify or repair this box's store",))):
        line = _refused(lab.floyd_as(bob, *args, cwd=bp), f"{bob} may not", *words)
        assert "alice-secret" not in line
    assert not out.exists() and not (lab.homes[bob] / "ap.fx").exists()

    # a raw request naming alice's trees as bob's code: never taken
    probe = ("import json, sys\nfrom floydd.client import Client\nfrom floydd.errors import FloyddError\n"
             f"c = Client({str(lab.socket)!r}, timeout=30)\nout = []\n"
             f"for tree in {[trees['faces:1'], job['code_tree']]!r}:\n"
             "    try:\n"
             "        c.submit({'project': 'bp', 'command': 'cat /code/*', 'code_tree': tree})\n"
             "        out.append('taken')\n"
             "    except FloyddError as e:\n"
             "        out.append(e.code)\n"
             "print(json.dumps(out))\n")
    said = lab.run_python_as(bob, probe)
    assert said.returncode == 0, said.stderr
    assert json.loads(said.stdout) == ["code_tree_refused", "code_tree_refused"]
    listed = json.loads(_ok(lab.floyd_as(bob, "data", "ls", "--json")))
    assert [v["ref"] for v in listed] == ["mnist:1"]             # nothing else of alice's, no tree of hers
    assert trees["faces:1"] not in json.dumps(listed)
    assert [j["id"] for j in client.jobs()] == ["ap/1"]          # none of bob's attempts made a job
    assert [v["ref"] for v in client.datasets("mnist")] == ["mnist:1"]   # nor a poisoned mnist:2
    assert "copied" in _ok(lab.floyd_as(bob, "logs", "ap/1", cwd=bp))   # logs are the lab's (job_logs)

    # alice may read her own code; the admin may read it all, and collect garbage
    mine = lab.homes[alice] / "ap-code"
    _ok(lab.floyd_as(alice, "clone", "ap/1", str(mine)))
    assert (mine / "config.yaml").read_text() == SECRET
    theirs = lab.homes[admin]
    _ok(lab.floyd_as(admin, "output", "ap/1", str(theirs / "out")))
    assert (theirs / "out" / "model.txt").read_text() == SECRET
    _ok(lab.floyd_as(admin, "data", "clone", "faces", str(theirs / "faces")))
    assert (theirs / "faces" / "faces.txt").read_text() == "alice's faces\n"
    _ok(lab.floyd_as(admin, "clone", "ap/1", str(theirs / "code")))
    assert (theirs / "code" / "config.yaml").read_text() == SECRET
    _ok(lab.floyd_as(admin, "data", "gc"))
