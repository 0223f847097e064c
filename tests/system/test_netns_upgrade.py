"""A rolling upgrade (issues 15, 20): three boxes of the previous release, built from this
repository's history (packaging/releases.json names its commit), upgraded one by one to this
tree while a job runs, in three namespace hosts.

Between upgrades the mixed cluster keeps working (a job submitted through an upgraded box
runs), and what came with the new release is refused plainly until every box has it; once the
last box is upgraded the cluster's level rises by itself (floydd.cluster.state.versions), everyone
of the lab is signed in on the boxes that were members then (floydd.cluster.state.signin), accounts
and the audit log work, and the job that ran through every restart, its own box's too,
succeeds with its output. Then ``floydd drain`` keeps new work off a box until undone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.harness.netns import Floydd, attempt, netns  # noqa: F401  (netns: the fixture, registered for this module)
from tests.netns.network import REPO

pytestmark = pytest.mark.slow

RELEASES = json.loads((REPO / "packaging" / "releases.json").read_text())


def _previous_release(folder: Path) -> str:
    """The previous release's interpreter: its tree from git, installed (no dependencies: the
    same ones as ours) into a venv that sees this machine's packages."""
    release = next(r for r in RELEASES["releases"] if r["version"] == RELEASES["previous"])
    have = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{release['commit']}^{{commit}}"],
                          capture_output=True)
    if have.returncode != 0:
        pytest.skip(f"this checkout lacks the history of release {release['version']} (a shallow clone)")
    src = folder / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", release["commit"]], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(folder / "venv")], check=True)
    python = str(folder / "venv" / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(src)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    said = subprocess.run([python, "-c", "import floydd; print(floydd.__version__)"], capture_output=True, text=True,
                          cwd=folder, check=True)
    assert said.stdout.strip() == release["version"]
    return python


def test_a_cluster_of_the_previous_release_is_upgraded_box_by_box_while_a_job_runs(netns, tmp_path):
    old = _previous_release(tmp_path / "previous")
    net = netns(3)
    env = {"FLOYDD_SANDBOX": "none", "FLOYDD_CLUSTER_HEARTBEAT": "0.5", "FLOYDD_TAIL_INTERVAL": "0.05"}
    boxes: list[Floydd] = []

    previous = {**env, "PYTHONPATH": None}          # the hosts' default would import this checkout

    def floydd(python, i, *args, check=True):
        return net.host(i).floydd(tmp_path / f"s{i}", *args, check=check, python=python, cwd=tmp_path,
                                  env=previous if python == old else env)

    for i, gpus in enumerate(["0", "1", "0"], start=1):          # the job's box: box2, the only GPU
        addr = f"{net.host(i).ip}:7654"
        if i == 1:
            floydd(old, 1, "init", "--name", "lab", "--listen", addr, "--advertise", addr)
        else:
            token = floydd(old, 1, "token", "create", "--ttl", "10m").stdout.strip()
            floydd(old, i, "join", token, "--listen", addr, "--advertise", addr)
        box = Floydd(net.host(i), tmp_path / f"s{i}", ("--node-name", f"box{i}", "--dev-fake-gpus", gpus),
                     previous, python=old, cwd=tmp_path)
        boxes.append(box.start())
    lead = boxes[0].client

    def members() -> dict:
        return attempt(lead.cluster) or {"members": []}
    wait_until(lambda: sum(m["role"] == "voter" for m in members()["members"]) == 3, timeout=90, what="3 voters")
    wait_until(lambda: members().get("protocol") == 2, timeout=60, what="the 0.2 cluster at its own level")
    floydd(old, 1, "user", "add", "alice")                      # people of the previous release carry over

    project = tmp_path / "proj"
    project.mkdir()
    release = tmp_path / "release-the-job"
    (project / "train.py").write_text(
        "import os, pathlib, time\n"
        f"flag = pathlib.Path({str(release)!r})\n"
        "for step in range(600):\n"
        "    print(f'step {step}', flush=True)\n"
        "    if flag.exists():\n"
        "        break\n"
        "    time.sleep(0.5)\n"
        "pathlib.Path(os.environ['FLOYD_OUTPUT'], 'model.txt').write_text('weights\\n')\n")
    boxes[0].floyd("init", "up", cwd=project)
    boxes[0].floyd("run", "--gpu", "python train.py", cwd=project)    # the previous release's CLI

    def job(key: str) -> dict:
        return next((j for j in attempt(boxes[0].client.jobs, key.split("/")[0]) or () if j["id"] == key), {})
    wait_until(lambda: job("up/1").get("state") == "running", timeout=90, what="up/1 to run on box2")

    for step, i in enumerate((1, 3, 2)):                        # the job's own box last
        box = boxes[i - 1]
        box.stop()                                              # SIGTERM to the daemon alone, as the unit does
        box.python, box.cwd, box.env = sys.executable, REPO, {**box.env, "PYTHONPATH": str(REPO)}
        box.start(timeout=60)
        wait_until(lambda: next((m for m in members()["members"] if m["name"] == f"box{i}"), {}).get("version")
                   == _ours(), timeout=90, what=f"box{i} back, saying its release")
        assert job("up/1").get("state") == "running", job("up/1")
        if step == 0:                                           # a mixed cluster: old and new boxes
            assert members()["protocol"] == 2
            mixed = boxes[0].floyd("run", "-f", "echo from a mixed cluster", cwd=project)
            assert "from a mixed cluster" in mixed.stdout
            # what came with 0.3 (where a person is signed in) is refused plainly, naming the boxes behind
            refused = floydd(sys.executable, 1, "user", "add", "carol", "--box", "box1", check=False)
            said = refused.stdout + refused.stderr
            assert refused.returncode != 0 and "Traceback" not in said, said
            assert "person.add needs every box of the cluster on floydd 0.3 or later: box2, box3 run an older " \
                   "release" in said, said

    wait_until(lambda: members().get("protocol") == 3, timeout=60, what="the cluster's level to rise to 3")
    ids = sorted(m["id"] for m in members()["members"])
    people = {p["name"]: p for p in json.loads(floydd(sys.executable, 3, "user", "list", "--json").stdout)}
    assert people["alice"]["boxes"] == ids and not people["alice"]["every_box"]    # signed in where she was
    assert "carol" not in people
    added = floydd(sys.executable, 1, "user", "add", "bob").stdout
    assert "bob added as a user; their login name acts as them on box1" in added    # the box it ran through
    audit = json.loads(floydd(sys.executable, 2, "audit", "--json").stdout)
    assert audit[0]["op"] == "cluster.protocol" and [e["op"] for e in audit].count("cluster.protocol") == 2
    assert [e["what"] for e in audit if e["op"] == "person.add"] == ["name=alice role=user", "name=bob role=user"], audit
    assert "the chain is whole" in floydd(sys.executable, 3, "audit", "verify").stdout

    release.write_text("go\n")
    wait_until(lambda: job("up/1").get("state") in ("success", "failed", "lost", "stopped"), timeout=90,
               what="up/1 to end")
    assert job("up/1")["state"] == "success", job("up/1")
    assert job("up/1")["attempts"] == 1                     # it ran once, through three restarts
    boxes[0].floyd("output", "up/1", str(tmp_path / "out"), cwd=project)
    assert (tmp_path / "out" / "model.txt").read_text() == "weights\n"

    # drain: no new work on box2 (the only GPU), the queued job waits; undone, it runs
    assert "drained" in floydd(sys.executable, 2, "drain").stdout
    wait_until(lambda: next(m for m in members()["members"] if m["name"] == "box2")["health"] == "draining",
               timeout=30, what="box2 listed draining")
    boxes[0].floyd("run", "--gpu", "echo after the drain", cwd=project)
    wait_until(lambda: job("up/3").get("waiting_for"), timeout=30, what="up/3 to say why it waits")
    assert job("up/3")["state"] == "queued", job("up/3")
    floydd(sys.executable, 2, "drain", "--off")
    wait_until(lambda: job("up/3").get("state") == "success", timeout=60, what="up/3 to run once undrained")


def _ours() -> str:
    import floydd
    return floydd.__version__
