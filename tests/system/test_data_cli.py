"""`floyd data` end to end through the daemon: upload, ls, info, clone, delete, verify, gc."""

from __future__ import annotations

import filecmp
import json
import os
import re


def _tree(root):
    (root / "sub" / "empty").mkdir(parents=True)
    (root / "a.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (root / "sub" / "b.txt").write_text("hello\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)


def _same(a, b):
    cmp = filecmp.dircmp(a, b)
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files, cmp.report()
    for sub in cmp.common_dirs:
        _same(a / sub, b / sub)


def test_upload_list_info_clone_delete(daemon, tmp_path):
    src = tmp_path / "src"
    _tree(src)
    first = json.loads(daemon.floyd("data", "upload", str(src), "--name", "mnist", "-m", "v1", "--json").stdout)
    assert (first["name"], first["version"], first["files"]) == ("mnist", 1, 3)
    (src / "sub" / "b.txt").write_text("changed\n")
    second = daemon.floyd("data", "upload", str(src), "--name", "mnist").stdout
    assert "mnist:2: 3 files" in second and "stored on this box only" in second     # a box alone keeps one copy

    listing = daemon.floyd_json("data", "ls")
    assert sorted((v["name"], v["version"]) for v in listing) == [("mnist", 1), ("mnist", 2)]
    assert "mnist:2" in daemon.floyd("data", "ls", "mnist").stdout
    info = daemon.floyd_json("data", "info", "mnist:latest")
    assert info["version"] == 2 and {e["path"] for e in info["entries"]} >= {"a.bin", "sub/b.txt", "sub/empty"}
    assert (info["copies"], info["replicas"], info["silent_holders"]) == (1, 1, [])
    assert "copies   1 of 1 on " in daemon.floyd("data", "info", "mnist:1").stdout

    out = tmp_path / "out"
    daemon.floyd("data", "clone", "mnist:2", str(out))
    _same(src, out)
    assert (out / "sub" / "empty").is_dir()
    assert os.stat(out / "run.sh").st_mode & 0o777 == 0o755

    daemon.floyd("data", "delete", "mnist:1", "-y")
    assert [v["version"] for v in daemon.floyd_json("data", "ls", "mnist")] == [2]
    res = daemon.floyd("data", "clone", "mnist:1", str(tmp_path / "gone"), check=False)
    assert res.returncode == 1 and "no version 1" in res.stderr and "mnist:2" in res.stderr  # names what exists
    gc = daemon.floyd_json("data", "gc")
    assert gc["removed"] >= 1


def test_verify_names_damaged_objects_and_versions(daemon, tmp_path):
    src = tmp_path / "src"
    _tree(src)
    daemon.floyd("data", "upload", str(src), "--name", "ds")
    assert json.loads(daemon.floyd("data", "verify", "--json").stdout)["damaged"] == []
    objects = sorted(p for p in (daemon.state / "store" / "objects").rglob("*") if p.is_file())
    victim = max(objects, key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    res = daemon.floyd("data", "verify", check=False)
    assert res.returncode == 1 and "DAMAGED" in res.stdout and "ds:1" in res.stdout
    bad = daemon.floyd("data", "clone", "ds", str(tmp_path / "out"), check=False)
    assert bad.returncode == 1 and "ds:1" in bad.stderr and "Traceback" not in bad.stderr


def test_unsafe_trees_are_refused_with_the_file_named(daemon, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.txt").write_text("x")
    os.symlink("/etc/passwd", src / "escape")
    res = daemon.floyd("data", "upload", str(src), "--name", "bad", check=False)
    assert res.returncode == 1 and "escape" in res.stderr and "Traceback" not in res.stderr
    assert daemon.floyd_json("data", "ls") == []


def test_an_interrupted_upload_commits_nothing_and_a_rerun_reuses_what_was_stored(daemon, tmp_path):
    src = tmp_path / "big"
    src.mkdir()
    for i in range(24):
        (src / f"part{i:02d}.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    objects = daemon.state / "store" / "objects"
    count = lambda: sum(1 for p in objects.rglob("*") if p.is_file())  # noqa: E731
    stream = daemon.client.upload(src, "big")
    for event in stream:  # wait until some data is stored, then hang up like Ctrl-C
        if "progress" in event and event["progress"][0] >= 16 * 1024 * 1024:
            break
    stream.close()
    assert count() >= 4
    version = json.loads(daemon.floyd("data", "upload", str(src), "--name", "big", "--json").stdout)
    assert version["version"] == 1 and version["files"] == 24
    assert [v["version"] for v in daemon.floyd_json("data", "ls", "big")] == [1]  # the hang-up committed nothing
    log = (daemon.state.parent / "daemon.log").read_text()
    rerun = [line for line in log.splitlines() if "snapshot " in line and "24 files" in line][-1]
    new_objects = int(re.search(r"(\d+) new objects", rerun).group(1))
    assert new_objects < count() - 3, rerun  # what the first attempt stored was not written again


def test_an_upload_cannot_take_a_jobs_output_name(daemon, tmp_path):
    src = tmp_path / "src"
    _tree(src)
    res = daemon.floyd("data", "upload", str(src), "--name", "proj/3/output", check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "output" in res.stderr and len(res.stderr.strip().splitlines()) <= 2
    assert daemon.floyd_json("data", "ls") == []
