"""A box alone is a cluster of one, and keeps what it has: through ``floydd init``, through
``floydd join`` (its store re-sealed under the cluster's secret, even across a crash), and
from a state folder written by the previous release (run from the git history)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_ports, wait_until
from tests.harness.processes import Daemon, kill_agents
from tests.harness.processes import box as new_box

PREVIOUS_RELEASE = "26a4a85"
"""The last commit before a box alone became a one-voter cluster (its state folder has
records and a catalog but no control-plane log)."""

FINAL = {"success", "failed", "stopped", "timeout", "lost"}


def _box(tmp_path: Path, name: str, **env) -> Daemon:
    return new_box(tmp_path, name, cluster=False, env={"FLOYDD_SAMPLE_INTERVAL": None, "FLOYD_DEBUG": "1", **env})


def _stop(box: Daemon) -> None:
    if box.proc is not None and box.proc.poll() is None:
        box.kill(signal.SIGTERM)


def _ended(box: Daemon, key: str, timeout: float = 60) -> dict:
    return wait_until(lambda: (j := box.client.job(key))["state"] in FINAL and j, timeout=timeout,
                      what=f"{key} to end")


def _run(box: Daemon, command: str, *flags: str) -> str:
    return json.loads(box.floyd("run", "--json", *flags, command).stdout)["id"]


def _data(folder: Path, megabytes: int = 1, files: int = 4) -> Path:
    folder.mkdir(parents=True)
    for i in range(files):
        (folder / f"part-{i}.bin").write_bytes(os.urandom(megabytes * 2**20 // files))
    (folder / "README").write_text("digits\n")
    return folder


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _statuses(box: Daemon) -> dict[str, str]:
    return {j["id"]: j["state"] for j in box.floyd_json("status")}


@pytest.fixture
def boxes():
    made: list[Daemon] = []
    yield made
    for box in made:
        _stop(box)
        kill_agents(box.state)


def test_a_box_alone_is_one_voter_and_init_keeps_its_jobs_and_datasets(tmp_path, boxes):
    box = _box(tmp_path, "solo")
    boxes.append(box)
    box.start()
    # issue 23: idle and alone, it has not loaded cryptography (~8 MiB) nor made its node key
    assert "cryptography" not in Path(f"/proc/{box.proc.pid}/maps").read_text()
    assert not (box.state / "tls" / "node.key").exists() and (box.state / "tls" / "node-id").exists()
    box.floyd("init", "proj")
    members = json.loads(box.floydd("members", "--json").stdout)
    assert [(m["id"], m["role"], m["leader"]) for m in members["members"]] == [(members["node_id"], "voter", True)]
    assert members["initialised"] is False
    assert "cluster of one" in box.floydd("members").stdout
    first = _run(box, "python -c 'print(42)'")
    assert _ended(box, first)["state"] == "success"
    src = _data(tmp_path / "digits")
    box.floyd("data", "upload", str(src), "--name", "digits")
    _stop(box)

    port, api = free_ports(2)
    box.floydd("init", "--name", "lab", "--listen", f"127.0.0.1:{port}", "--advertise", f"127.0.0.1:{port}",
            "--api-listen", f"127.0.0.1:{api}")
    assert (box.state / "tls" / "node.key").stat().st_mode & 0o777 == 0o600
    box.start()
    members = json.loads(box.floydd("members", "--json").stdout)
    assert members["initialised"] is True
    assert [(m["role"], m["address"]) for m in members["members"]] == [("voter", f"127.0.0.1:{port}")]
    assert _statuses(box) == {first: "success"}
    assert "42" in box.floyd("logs", first).stdout
    box.floyd("data", "clone", "digits", str(tmp_path / "copy"))
    assert _digest(tmp_path / "copy") == _digest(src)
    second = _run(box, "python -c 'print(43)'")
    assert second == "proj/2" and _ended(box, second)["state"] == "success"
    assert box.floydd("token", "create", "--ttl", "10m").stdout.startswith("FLD1.")


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> Path:
    """The landed code of the release before, from the git history, importable as ``floydd``."""
    repo = Path(__file__).resolve().parents[2]
    found = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
                           capture_output=True)
    assert found.returncode == 0, f"this test needs the git history (commit {PREVIOUS_RELEASE}): use a full clone"
    root = tmp_path_factory.mktemp("previous-release")
    archive = subprocess.run(["git", "-C", str(repo), "archive", PREVIOUS_RELEASE], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    for folder in ("agent", "tui", "plugins"):           # what setup.py's package_dir maps
        (root / "floydd" / folder).symlink_to(root / folder)
    return root


@pytest.mark.slow
def test_a_state_folder_of_the_previous_release_keeps_its_jobs_datasets_queue_and_numbers(
        previous_release, tmp_path, boxes):
    old = _box(tmp_path, "box", PYTHONPATH=str(previous_release), PYTHONSAFEPATH="1")  # not the cwd's floydd
    boxes.append(old)
    old.start()
    old.floyd("init", "proj")
    done = _run(old, "python -c 'print(1)'")
    assert _ended(old, done)["state"] == "success"
    src = _data(tmp_path / "digits")
    old.floyd("data", "upload", str(src), "--name", "digits")
    busy = _run(old, "python -c 'import time; time.sleep(600)'", "--gpu", "2")
    wait_until(lambda: old.client.job(busy)["state"] == "running", timeout=30, what="the long job running")
    waiting = _run(old, "python -c 'print(3)'", "--gpu", "1")
    wait_until(lambda: old.client.job(waiting)["waiting_for"], timeout=30, what="the queued job to wait")
    assert not (old.state / "cluster" / "raft.db").exists(), "the previous release kept no control-plane log"
    _stop(old)                                          # the long job's agent runs on

    new = Daemon(state=old.state, env={k: v for k, v in old.env.items() if not k.startswith("PYTHON")},
                 project=old.project)
    boxes.append(new)
    new.start()
    wait_until(lambda: _statuses(new).get(waiting) in ("queued", "starting"), timeout=30, what="the queue kept")
    assert _statuses(new)[done] == "success" and _statuses(new)[busy] == "running"
    assert "1" in new.floyd("logs", done).stdout
    listed = {v["ref"] for v in new.floyd_json("data", "ls")}
    assert "digits:1" in listed
    new.floyd("data", "clone", "digits:1", str(tmp_path / "copy"))
    assert _digest(tmp_path / "copy") == _digest(src)
    fresh = _run(new, "python -c 'print(4)'")
    assert fresh == "proj/4", "numbers continue above the old jobs"
    assert _ended(new, fresh)["state"] == "success"
    assert _statuses(new)[waiting] != "success", "it waits: the long job still holds the GPUs"
    new.floyd("stop", busy)
    assert _ended(new, busy)["state"] == "stopped"
    assert _ended(new, waiting)["state"] == "success", "the old queue's job ran once its GPU was free"


@pytest.mark.slow
def test_a_used_box_joins_a_cluster_keeping_its_jobs_and_datasets_across_a_crash_while_resealing(tmp_path, boxes):
    lab = _box(tmp_path, "lab")
    pa, pb, api_a, api_b = free_ports(4)
    lab.floydd("init", "--name", "lab", "--listen", f"127.0.0.1:{pa}", "--advertise", f"127.0.0.1:{pa}",
            "--api-listen", f"127.0.0.1:{api_a}")
    boxes.append(lab)
    lab.start()
    lab.floyd("init", "proj")
    used = _box(tmp_path, "desk", FLOYDD_STORE_RESEAL_RATE="32")   # 256 MB: the re-seal takes ~8 s
    boxes.append(used)
    used.start()
    used.floyd("init", "desk")
    ran = _run(used, "python -c 'print(\"from the desk\")'")
    assert _ended(used, ran)["state"] == "success"
    src = _data(tmp_path / "big", megabytes=256, files=64)
    used.floyd("data", "upload", str(src), "--name", "big", timeout=600)
    key_before = (used.state / "store" / "key").read_text()
    _stop(used)

    token = lab.floydd("token", "create", "--ttl", "10m").stdout.strip()
    used.floydd("join", token, "--listen", f"127.0.0.1:{pb}", "--advertise", f"127.0.0.1:{pb}",
            "--api-listen", f"127.0.0.1:{api_b}")
    assert (used.state / "store" / "key.next").exists()
    log = open(used.state.parent / "daemon.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(used.state)],
                            env=used.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    journal = used.state / "store" / "rekey.db"
    try:
        wait_until(lambda: _resealed(journal) > 0 or proc.poll() is not None, timeout=120, interval=0.002,
                   what="the re-seal to get under way")
        wait_until(lambda: used.client.ping() or proc.poll() is not None, timeout=60, interval=0.01,
                   what="the daemon to answer")
        assert proc.poll() is None and (used.state / "store" / "key.next").exists(), \
            "the daemon answers while it re-seals (issue 21: no downtime)"
    finally:
        proc.kill()                                      # a crash in the middle of the re-seal
        proc.wait(timeout=30)
    assert (used.state / "store" / "key").read_text() == key_before, "killed before the key switch"

    used.start()                                         # answers at once, resumes the re-seal in the background
    wait_until(lambda: len(lab.client.cluster()["members"]) == 2, timeout=60, what="the desk to join")
    wait_until(lambda: (used.state / "store" / "key").read_text() == (lab.state / "store" / "key").read_text(),
               timeout=300, what="the re-seal to finish")
    assert _statuses(used)[ran] == "success", "its own job is still listed"
    assert "from the desk" in used.floyd("logs", ran).stdout
    wait_until(lambda: any(v["ref"] == "big:1" for v in lab.floyd_json("data", "ls")), timeout=60,
               what="its dataset in the cluster's catalog")
    lab.floyd("data", "clone", "big:1", str(tmp_path / "copy"), timeout=600)
    assert _digest(tmp_path / "copy") == _digest(src)
    assert (used.floyd("run", "--json", "python -c 'print(5)'").returncode == 0)


def _resealed(journal: Path) -> int:
    """Chunks the re-seal recorded as done so far (0 before it started)."""
    if not journal.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=1)) as db:
            return db.execute("SELECT count(*) FROM chunks WHERE new IS NOT NULL").fetchone()[0]
    except sqlite3.Error:
        return 0
