"""The audit log with real processes: a daemon, the floyd CLI making changes, ``floydd audit``
listing them with the person who made them, ``audit verify`` passing, an export an auditor
checks without the daemon, and one entry's bytes edited in raft.db found and named."""

from __future__ import annotations

import getpass
import json
import signal
import sqlite3

import pytest

from floydd.cluster.state.audit import entry_hash
from tests.conftest import wait_until

pytestmark = pytest.mark.slow


def test_changes_are_audited_by_person_verified_exported_and_an_edit_on_disk_is_named(daemon, tmp_path):
    me = getpass.getuser()
    daemon.floyd("run", "python -c \"import time; time.sleep(60)\"")
    wait_until(lambda: daemon.client.job("proj/1")["state"] == "running", timeout=60, what="proj/1 to run")
    daemon.floyd("stop", "proj/1")
    wait_until(lambda: daemon.client.job("proj/1")["state"] == "stopped", timeout=60, what="proj/1 to stop")
    daemon.floyd("delete", "proj/1", input="y\n")

    entries = json.loads(daemon.floydd("audit", "--json").stdout)
    mine = [(e["op"], e["who"]) for e in entries if e["who"] == me]
    assert ("job.submit", me) in mine and ("job.update", me) in mine and ("job.delete", me) in mine
    stop = next(e for e in entries if e["op"] == "job.update" and e["who"] == me)
    assert "job=proj/1" in stop["what"] and stop["box"]
    table = daemon.floydd("audit").stdout
    assert "job.delete" in table and me in table
    assert "the chain is whole" in daemon.floydd("audit", "verify").stdout

    export = tmp_path / "audit.jsonl"
    daemon.floydd("audit", "export", str(export))
    assert len(export.read_text().splitlines()) == len(entries)
    for where, words in ((export, "exists"), (tmp_path / "no" / "a.jsonl", "is not a folder")):
        res = daemon.floydd("audit", "export", str(where), check=False)
        assert res.returncode == 1 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
    daemon.floydd("audit", "export", "--force", str(export))
    assert "the chain is whole" in daemon.floydd("audit", "verify", "--file", str(export)).stdout

    # someone with the disk edits who stopped the job, in the database itself
    db = sqlite3.connect(daemon.state / "cluster" / "raft.db")
    with db:
        db.execute("UPDATE audit SET entry = replace(entry, ?, ?) WHERE seq = ?",
                   (f'"who":"{me}"', '"who":"mallory"', stop["seq"]))
    db.close()
    res = daemon.floydd("audit", "verify", check=False)
    assert res.returncode == 1
    assert f"entry {stop['seq']} (job.update by mallory at " in res.stderr and "does not match" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    # an export edited the same way fails the auditor's check the same way
    lines = export.read_text().splitlines()
    lines.pop(stop["seq"] - 1)
    export.write_text("\n".join(lines) + "\n")
    res = daemon.floydd("audit", "verify", "--file", str(export), check=False)
    assert res.returncode == 1 and f"entry {stop['seq'] + 1} (" in res.stderr


def _stored(daemon) -> list[dict]:
    db = sqlite3.connect(daemon.state / "cluster" / "raft.db")
    try:
        return [json.loads(text) for (text,) in db.execute("SELECT entry FROM audit ORDER BY idx")]
    finally:
        db.close()


def _store(daemon, entries: list[dict]) -> None:
    db = sqlite3.connect(daemon.state / "cluster" / "raft.db")
    with db:
        for e in entries:
            db.execute("UPDATE audit SET entry = ? WHERE idx = ?",
                       (json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False), e["index"]))
    db.close()


def _restart_and_see_it_reported(daemon, seq: int, words: str, while_down=None) -> tuple[str, dict]:
    """Restart the daemon (``while_down()`` run while it is stopped); its start must report an
    edit at ``seq``: the ERROR line (naming the entry and the copy kept), floydd status, the
    audit.tamper entry. Returns the copy's path and that entry."""
    log = daemon.state.parent / "daemon.log"
    seen = len(log.read_text()) if log.exists() else 0
    daemon.kill(signal.SIGTERM)
    if while_down is not None:
        while_down()
    daemon.start()

    def line():
        return next((ln for ln in log.read_text()[seen:].splitlines() if "AUDIT CHAIN EDITED ON DISK" in ln), None)
    wait_until(line, timeout=30, what="the start check's ERROR line")
    said = line()
    assert "ERROR" in said and f"entry {seq}" in said and words in said, said
    kept = said.split("the chain as found is kept in ")[1].split(" (")[0]
    assert kept.startswith(str(daemon.state / "cluster" / "audit-tampered-")), said

    def recorded():
        return next((e for e in json.loads(daemon.floydd("audit", "--json").stdout)
                     if e["op"] == "audit.tamper" and f"first_seq={seq} " in e["what"]), None)
    wait_until(recorded, timeout=30, what="the audit.tamper entry")
    status = daemon.floydd("status")
    assert f"warning: this box's stored audit chain was edited: " in status.stderr and kept in status.stderr, status.stderr
    assert f"entry {seq}" in status.stderr
    return kept, recorded()


def test_a_recorded_head_catches_a_cut_and_a_rewrite_and_each_edit_is_reported_at_the_next_start(daemon):
    """The issue's holes: an edit on disk was silently undone at the next restart; a chain cut
    short, or rewritten with every later hash recomputed, passed verify."""
    me = getpass.getuser()
    for i in range(3):
        daemon.floyd("run", "true")
        wait_until(lambda: daemon.client.job(f"proj/{i + 1}")["state"] == "success", timeout=60, what="the job")
    daemon.floyd("delete", "proj/1", input="y\n")
    head = json.loads(daemon.floydd("audit", "head", "--json").stdout)
    chain = _stored(daemon)
    assert head["ok"] and head["seq"] == len(chain) and head["head"] == f"{len(chain)}:{chain[-1]['hash']}"
    printed = daemon.floydd("audit", "head").stdout.splitlines()
    assert printed[0] == head["head"] and f"floydd audit verify --head {head['head']}" in printed[1]
    assert "up to the recorded head" in daemon.floydd("audit", "verify", "--head", head["head"]).stdout

    # 1. the newest entry cut off while the daemon runs: verify passes, the recorded head does not
    last = chain[-1]
    db = sqlite3.connect(daemon.state / "cluster" / "raft.db")
    with db:
        db.execute("DELETE FROM audit WHERE idx = ?", (last["index"],))
    db.close()
    assert "the chain is whole" in daemon.floydd("audit", "verify").stdout
    res = daemon.floydd("audit", "verify", "--head", head["head"], check=False)
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert f"the chain ends at entry {last['seq'] - 1}, before the recorded head, entry {last['seq']}" in res.stderr
    # ... and the next start says so, keeps the copy as found and writes the entry again from the log
    kept, _ = _restart_and_see_it_reported(daemon, last["seq"], "removed from the stored chain")
    res = daemon.floydd("audit", "verify", "--file", kept, "--head", head["head"], check=False)
    assert res.returncode == 1 and "before the recorded head" in res.stderr
    assert "up to the recorded head" in daemon.floydd("audit", "verify", "--head", head["head"]).stdout

    # 2. an entry rewritten and every later hash recomputed while it runs: whole, but not the head
    chain = _stored(daemon)
    at = next(i for i, e in enumerate(chain) if e["op"] == "job.submit" and e["who"] == me)
    rewritten = [dict(e) for e in chain]
    rewritten[at]["who"] = "mallory"
    for i in range(at, len(rewritten)):
        rewritten[i]["prev"] = rewritten[i - 1]["hash"] if i else rewritten[i]["prev"]
        rewritten[i]["hash"] = entry_hash(rewritten[i])
    _store(daemon, rewritten[at:])
    assert "the chain is whole" in daemon.floydd("audit", "verify").stdout
    res = daemon.floydd("audit", "verify", "--head", head["head"], check=False)
    assert res.returncode == 1 and f"entry {head['seq']} (" in res.stderr and "rewritten" in res.stderr
    _restart_and_see_it_reported(daemon, chain[at]["seq"], f"who: stored 'mallory', derived '{me}'")
    assert "up to the recorded head" in daemon.floydd("audit", "verify", "--head", head["head"]).stdout

    # 3. an entry edited (no hash recomputed) while the daemon is down: reported, not silently undone
    delete = next(e for e in _stored(daemon) if e["op"] == "job.delete")
    kept, _ = _restart_and_see_it_reported(daemon, delete["seq"], "what: stored 'job=proj/2', derived 'job=proj/1'",
                                           while_down=lambda: _store(daemon, [dict(delete, what="job=proj/2")]))
    res = daemon.floydd("audit", "verify", "--file", kept, check=False)
    assert res.returncode == 1 and f"entry {delete['seq']} (job.delete by {me}" in res.stderr
    assert "the chain is whole" in daemon.floydd("audit", "verify").stdout
    assert len(list((daemon.state / "cluster").glob("audit-tampered-*.jsonl"))) == 3
