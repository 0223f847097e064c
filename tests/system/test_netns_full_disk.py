"""Copies go where they can live (issue 21): three real daemons in network namespace hosts,
box3's state folder (its store, raft log and records) on a small tmpfs filled to a few MB.

Every version uploaded on box1 reaches 2 copies on box1 and box2 (a copy chosen for box3
fails there for space, box3 says so in a heartbeat, box2 takes it); box3 is listed
``disk full`` by ``floyd nodes`` and ``floydd members`` and gets no job although it runs
none (CPU jobs go to the least loaded box); once its disk has room again it is healthy, the
next job goes to it, and it takes copies again.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import wait_until
from tests.integration.runtime._hostile import small_disk
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import attempt, form, listed, submit

pytestmark = pytest.mark.slow

ENV = {"FLOYDD_CLUSTER_HEARTBEAT": "0.5", "FLOYDD_STORE_SCRUB_RATE": "0", "FLOYDD_SAMPLE_INTERVAL": "0.5",
       "FLOYDD_TAIL_INTERVAL": "0.05", "FLOYDD_DATASET_COPY_WAIT": "30", "PYTHONUNBUFFERED": "1"}
MB = 1 << 20
COPY_TRIES = 24                  # new versions after the disk has room: each lands on box2 or box3 by rank
SLEEP = "python -c \"import time; time.sleep(120)\""


def _leave(folder, free: int) -> None:
    """Fill ``folder``'s disk until ``free`` bytes are left (a file ``filler``)."""
    st = os.statvfs(folder)
    size = st.f_bavail * st.f_frsize - free
    with open(folder / "filler", "wb", buffering=0) as f:
        while size > 0:
            size -= f.write(b"\0" * min(size, MB))


def _nodes(client) -> dict[str, dict]:
    return {n["name"]: n for n in attempt(client.nodes) or ()}


def _upload(box, tmp_path, name: str, size: int) -> str:
    src = tmp_path / name
    src.mkdir()
    (src / "blob.bin").write_bytes(os.urandom(size))
    res = box.floyd("data", "upload", str(src), "--name", name)
    return res.stdout + res.stderr


def _running_on(client, key: str) -> str:
    job = wait_until(lambda: (j := listed(client, key)).get("state") in ("starting", "running") and j.get("node") and j,
                     timeout=60, interval=0.1, what=f"{key} placed")
    return job["node"]


def test_copies_and_jobs_avoid_a_full_disk_and_come_back_when_it_has_room(netns, tmp_path):
    net = netns(3)
    with small_disk(tmp_path / "s3", "64m") as disk:
        boxes = [daemon for _h, _s, daemon, _c in form(net, tmp_path, ["0", "0", "0"], ENV)]
        client = boxes[0].client
        ids = {name: n["id"] for name, n in _nodes(client).items()}
        _leave(disk, 5 * MB)              # room for 5 MB: more than "full" (3 reserves), less than a version

        # Uploads: each answered with 2 copies, none on box3 (its copy fails there, box2 takes it)
        names = []
        for i in range(8):
            names.append(f"v{i}")
            out = _upload(boxes[0], tmp_path, names[-1], 8 * MB)
            assert "stored on 2 of 2 boxes" in out, out
            if i >= 3 and _nodes(client)["box3"]["health"] == "disk full":
                break
        full = _nodes(client)["box3"]
        assert full["health"] == "disk full", full
        assert "no space left" in full["store_why"] or "disk full" in full["store_why"], full
        for name in names:
            version = attempt(client.datasets, name)[0]
            assert sorted(version["holders"]) == sorted([ids["box1"], ids["box2"]]), version
            assert version["copies"] == 2
        assert "keeping a copy of" in boxes[2].log_tail(400_000), "box3 was never asked for a copy"
        shown = boxes[0].floyd("nodes").stdout
        assert "box3" in shown and "disk full" in shown and "no new copies or jobs go here" in shown, shown
        members = boxes[0].host.floydd(boxes[0].state, "members").stdout
        assert "disk full" in members and "no new copies or jobs go there" in members, members

        # Jobs: three CPU jobs; box3 runs none and would be the least loaded, yet gets none
        project = tmp_path / "proj"
        project.mkdir()
        (project / "main.py").write_text("print('hi')\n")
        keys = [submit(client, project, SLEEP) for _ in range(3)]
        placed = [_running_on(client, key) for key in keys]
        assert "box3" not in placed, placed

        # Space returns: box3 is healthy again, takes the next job and copies again
        (disk / "filler").unlink()
        wait_until(lambda: _nodes(client).get("box3", {}).get("health") == "healthy", timeout=30, interval=0.1,
                   what="box3 healthy again")
        assert _running_on(client, submit(client, project, SLEEP)) == "box3"
        for i in range(COPY_TRIES):           # box2 or box3 by rendezvous rank: 2^-COPY_TRIES to miss box3
            out = _upload(boxes[0], tmp_path, f"after{i}", MB)
            assert "stored on 2 of 2 boxes" in out, out
            if ids["box3"] in attempt(client.datasets, f"after{i}")[0]["holders"]:
                break
        else:
            pytest.fail(f"box3 took none of {COPY_TRIES} copies after its disk had room again")
        for key in keys:
            client.stop(key)
        for daemon in boxes:
            daemon.stop()
