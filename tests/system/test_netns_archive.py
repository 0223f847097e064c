"""State that stays small, with real daemons in namespace hosts: jobs through a 3-box cluster
are archived out of the hot state, then a fourth box joins and is up to date.

The issue's check runs 20,000 jobs; that figure is bench/cluster_archive.py's (it commits
them through the state machine's commands). Here the jobs are real (``floyd run`` through
the boxes' APIs, placed, run by agents, reported), few enough for CI, with tight knobs: the
leader keeps 20 finished jobs hot and archives the rest a second after they end, and the log
is compacted every 300 entries, so the fourth box can learn the archived jobs only from the
streamed snapshot (it says so in its log). Jobs that write nothing to /output make no
dataset version.
"""

from __future__ import annotations

import json
import time

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from floydd.errors import FloyddError
from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import form, init_or_join

pytestmark = pytest.mark.slow

JOBS = 240
KEEP = 20
KNOBS = {"FLOYDD_ARCHIVE_KEEP": str(KEEP), "FLOYDD_ARCHIVE_AFTER": "1", "FLOYDD_RAFT_SNAPSHOT_EVERY": "300",
         "FLOYDD_CLUSTER_HEARTBEAT": "1", "FLOYDD_TAIL_INTERVAL": "0.05", "FLOYDD_LOG_LEVEL": "info"}


def test_jobs_are_archived_and_a_fourth_box_that_joins_later_is_up_to_date(netns, tmp_path):
    net = netns(4)
    clients = [client for _host, _state, _daemon, client in form(net, tmp_path, ["0", "0", "0"], KNOBS)]
    project = tmp_path / "proj"
    project.mkdir()
    (project / "save.py").write_text("import os\nopen(os.path.join(os.environ.get('FLOYD_OUTPUT', '/output'), "
                                     "'model.txt'), 'w').write('weights')\n")
    t0 = time.monotonic()
    keys = []
    for i in range(JOBS):                  # through every box's API; one job in ten saves an /output
        body = {"project": "arch", "command": "python save.py" if i % 10 == 0 else "true",
                "code_path": str(project), "gpus": 0, "idem_key": f"arch-{i:03d}"}
        keys.append(clients[i % 3].submit(body)["id"])
    assert len(set(keys)) == JOBS

    def settled():
        try:
            hot = [j for j in clients[0].jobs("arch") if not j.get("archived")]
            every = clients[0].jobs("arch")
        except FloyddError:
            return False
        ended = all(j["state"] in ("success", "failed", "stopped", "lost") for j in every)
        return ended and len(every) == JOBS and len(hot) <= KEEP and every
    every = wait_until(settled, timeout=240, interval=1.0, what="every job to end and the old ones to be archived")
    ran = time.monotonic() - t0
    assert {j["state"] for j in every} == {"success"}, [(j["id"], j["state"], j["reason"]) for j in every
                                                        if j["state"] != "success"]
    assert len({j["node"] for j in every}) == 3, "the jobs ran on every box"
    by_key = {j["id"]: j for j in every}
    saved = [k for i, k in enumerate(keys) if i % 10 == 0]
    assert all(by_key[k]["output_version"] for k in saved)
    assert all(by_key[k]["output_version"] == "" for i, k in enumerate(keys) if i % 10)
    catalog = {v["name"] for v in clients[1].datasets()}
    assert catalog == {f"{k}/output" for k in saved}, "only the jobs that saved something made a version"

    # a fourth box joins after the log was compacted past the archive commands
    host, state = init_or_join(net, tmp_path, 4)
    joined = time.monotonic()
    fourth = host.start_floydd(state, "--node-name", "box4", "--dev-fake-gpus", "0", env=KNOBS)
    client4 = Client(socket_path_for(fourth.state), timeout=30)

    def up_to_date():
        try:
            listed = client4.jobs("arch", stale=True)
        except FloyddError:
            return False
        return len(listed) == JOBS and listed
    listed = wait_until(up_to_date, timeout=30, interval=0.1, what="the fourth box to hold every job")
    caught_up = time.monotonic() - joined
    assert [j["id"] for j in listed] == [j["id"] for j in every]
    assert sum(j["archived"] for j in listed) >= JOBS - KEEP - 5
    assert "restored from the leader's snapshot" in fourth.log_tail(200_000), "the archive came with a snapshot"

    # from the new box: an archived job run elsewhere is read with its box's events, a retried
    # submission finds its archived job, /output of a job that saved nothing says so
    old = json.loads(fourth.floyd("info", keys[1], "--json").stdout)
    assert old["archived"] and old["state"] == "success" and old["node"] != "box4"
    assert any("exit" in e["message"] or "success" in e["message"] for e in old["events"]), old["events"]
    again = client4.submit({"project": "arch", "command": "true", "code_path": str(project), "gpus": 0,
                            "idem_key": "arch-001"})
    assert again["id"] == keys[1]
    out = fourth.floyd("output", keys[1], str(tmp_path / "out1"), check=False, cwd=project)
    assert out.returncode != 0 and "saved nothing" in out.stderr
    fourth.floyd("output", keys[0], str(tmp_path / "out0"), cwd=project)
    assert (tmp_path / "out0" / "model.txt").read_text() == "weights"
    table = fourth.floyd("status", "--all", "--limit", "5", cwd=project)
    assert table.stdout.count("arch/") == 5 and "--page 2" in table.stderr
    print(f"{JOBS} jobs through 3 boxes in {ran:.1f}s; a fourth box up to date {caught_up:.1f}s after its daemon "
          f"started")
