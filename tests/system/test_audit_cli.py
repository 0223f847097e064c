"""The audit log with real processes: a daemon, the floyd CLI making changes, ``floydd audit``
listing them with the person who made them, ``audit verify`` passing, an export an auditor
checks without the daemon, and one entry's bytes edited in raft.db found and named."""

from __future__ import annotations

import getpass
import json
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import wait_until

pytestmark = pytest.mark.slow


def _floydd(d, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", *args, ], env=d.env, cwd=d.project,
                         capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise AssertionError(f"floydd {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def test_changes_are_audited_by_person_verified_exported_and_an_edit_on_disk_is_named(daemon, tmp_path):
    me = getpass.getuser()
    daemon.floyd("run", "python -c \"import time; time.sleep(60)\"")
    wait_until(lambda: daemon.client.job("proj/1")["state"] == "running", timeout=60, what="proj/1 to run")
    daemon.floyd("stop", "proj/1")
    wait_until(lambda: daemon.client.job("proj/1")["state"] == "stopped", timeout=60, what="proj/1 to stop")
    daemon.floyd("delete", "proj/1", input="y\n")

    entries = json.loads(_floydd(daemon, "audit", "--json").stdout)
    mine = [(e["op"], e["who"]) for e in entries if e["who"] == me]
    assert ("job.submit", me) in mine and ("job.update", me) in mine and ("job.delete", me) in mine
    stop = next(e for e in entries if e["op"] == "job.update" and e["who"] == me)
    assert "job=proj/1" in stop["what"] and stop["box"]
    table = _floydd(daemon, "audit").stdout
    assert "job.delete" in table and me in table
    assert "the chain is whole" in _floydd(daemon, "audit", "verify").stdout

    export = tmp_path / "audit.jsonl"
    _floydd(daemon, "audit", "export", str(export))
    assert len(export.read_text().splitlines()) == len(entries)
    for where, words in ((export, "exists"), (tmp_path / "no" / "a.jsonl", "is not a folder")):
        res = _floydd(daemon, "audit", "export", str(where), check=False)
        assert res.returncode == 1 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
    _floydd(daemon, "audit", "export", "--force", str(export))
    assert "the chain is whole" in _floydd(daemon, "audit", "verify", "--file", str(export)).stdout

    # someone with the disk edits who stopped the job, in the database itself
    db = sqlite3.connect(daemon.state / "cluster" / "raft.db")
    with db:
        db.execute("UPDATE audit SET entry = replace(entry, ?, ?) WHERE seq = ?",
                   (f'"who":"{me}"', '"who":"mallory"', stop["seq"]))
    db.close()
    res = _floydd(daemon, "audit", "verify", check=False)
    assert res.returncode == 1
    assert f"entry {stop['seq']} (job.update by mallory at " in res.stderr and "does not match" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    # an export edited the same way fails the auditor's check the same way
    lines = export.read_text().splitlines()
    lines.pop(stop["seq"] - 1)
    export.write_text("\n".join(lines) + "\n")
    res = _floydd(daemon, "audit", "verify", "--file", str(export), check=False)
    assert res.returncode == 1 and f"entry {stop['seq'] + 1} (" in res.stderr
