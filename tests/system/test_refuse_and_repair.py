"""Refuse, then repair, through the real CLI: a daemon killed mid-life whose catalog lost its WAL.

The lab's box is killed (``kill -9``), then someone deletes ``catalog.db-wal`` (it "looked
like a temp file"). The daemon refuses to start and says which file and what to do;
``floyd`` says so too instead of starting over empty; ``floydd repair --dry-run`` changes
nothing; ``floydd repair`` rebuilds the catalog and the next daemon has every version back,
and gc frees nothing a version needs.
"""

from __future__ import annotations

import json

import pytest

from tests.system.test_data_cli import _same, _tree


@pytest.mark.slow
def test_a_catalog_that_lost_its_wal_is_refused_named_and_repaired(daemon, tmp_path):
    src = tmp_path / "src"
    _tree(src)
    daemon.floyd("data", "upload", str(src), "--name", "mnist")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("notes\n")
    daemon.floyd("data", "upload", str(tmp_path / "notes"), "--name", "other")
    catalog = daemon.state / "store" / "catalog.db"
    daemon.kill()                                       # SIGKILL: the WAL holds every version
    (daemon.state / "store" / "catalog.db-wal").unlink()
    objects = sorted((daemon.state / "store" / "objects").rglob("*"))

    refused = daemon.floydd("start", "--state-dir", daemon.state, check=False)
    assert refused.returncode == 1
    assert f"{catalog} lost its write-ahead log" in refused.stderr and "floydd repair" in refused.stderr
    assert "Traceback" not in refused.stderr
    cli = daemon.floyd("data", "ls", check=False)       # the CLI starts a daemon: it refuses the same way
    assert cli.returncode != 0 and "catalog.db" in cli.stderr, cli.stderr

    dry = daemon.floydd("repair", "--dry-run", "--state-dir", daemon.state, check=False)
    assert dry.returncode == 0 and "would be rebuilt" in dry.stdout and not list(catalog.parent.glob("*.damaged-*"))
    assert "2 version(s) put back" in dry.stdout and "lost-found" not in dry.stdout, dry.stdout
    done = daemon.floydd("repair", "--state-dir", daemon.state, check=False)
    assert done.returncode == 0 and "repaired: floydd can start" in done.stdout, done.stdout + done.stderr
    assert list(catalog.parent.glob("catalog.db.damaged-*"))

    daemon.start()
    listed = {v["ref"] for v in daemon.floyd_json("data", "ls")}
    assert {"mnist:1", "other:1"} <= listed
    assert json.loads(daemon.floyd("data", "gc", "--json").stdout)["removed"] == 0
    assert sorted((daemon.state / "store" / "objects").rglob("*")) == objects
    daemon.floyd("data", "clone", "mnist:1", str(tmp_path / "out"))
    _same(src, tmp_path / "out")
    assert json.loads(daemon.floyd("data", "verify", "--json").stdout)["ok"]
