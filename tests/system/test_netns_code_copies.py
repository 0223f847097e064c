"""A job's code outlives the box it was submitted from (issue 21), with real daemons on four
netns hosts.

box4 (no GPU, so no job runs there; the cluster's learner, so losing it costs no quorum)
submits a job; the answer comes once a second box holds the code. box4 is then destroyed
(every process killed, its cable pulled, its state folder wiped), and another box makes a
new copy of the code once box4's copy stops counting (the replica grace). The box running
the job is then cut off for good: past ``--lost-after`` the job is lost and rerun, on a third
box, which runs it from its code (the job prints a word read from its code folder). Before
issue 21 the rerun had no box to fetch the code from (only the box that sent it and the box
that ran it had it) and sat in ``starting``.
"""

from __future__ import annotations

import shutil
import time
import uuid

import pytest

from floydd.errors import UserError
from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import attempt, crash, form, listed

pytestmark = pytest.mark.slow

GRACE = 3.0
ENV = {"FLOYDD_CLUSTER_HEARTBEAT": "0.5", "FLOYDD_NODE_SUSPECT_AFTER": "1", "FLOYDD_REPLICA_GRACE": str(GRACE),
       "FLOYDD_JOB_LOST_AFTER": "4", "FLOYDD_TAIL_INTERVAL": "0.05", "FLOYDD_SAMPLE_INTERVAL": "0.5",
       "FLOYDD_STORE_SCRUB_RATE": "0", "FLOYDD_STOP_GRACE": "2", "PYTHONUNBUFFERED": "1"}
JOB = """\
import os, sys, time
word = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "word.txt")).read().strip()
attempt = int(os.environ["FLOYD_ATTEMPT"])
print(f"attempt {attempt} read {word} from its code", flush=True)
while attempt == 1:
    time.sleep(0.5)
"""


def _submitted(client, body: dict) -> dict | None:
    try:
        return client.submit(body)
    except UserError as exc:
        if exc.code != "no_such_resources":
            raise
        return None


def _holding(daemon, tree: str) -> bool:
    return f"now holds code tree {tree[:12]}" in daemon.log_tail(2_000_000)


def test_a_rerun_on_a_third_box_runs_from_its_code_after_the_box_it_came_from_is_destroyed(netns, tmp_path):
    net = netns(4)
    boxes = form(net, tmp_path, ["1", "1", "1", "0"], ENV)
    daemons = [daemon for _host, _state, daemon, _client in boxes]
    client = boxes[0][3]
    word = uuid.uuid4().hex
    project = tmp_path / "proj"
    project.mkdir()
    (project / "job.py").write_text(JOB)
    (project / "word.txt").write_text(word + "\n")

    body = {"project": "code", "command": "python job.py", "code_path": str(project), "gpus": 1,
            "idem_key": uuid.uuid4().hex, "restart": "on-lost"}
    # box4 (a learner that just joined) sees the GPU boxes as placeable once it has their
    # heartbeats; until then a submit there is refused ("no node has 1 GPU"), and retried (same key)
    answer = wait_until(lambda: _submitted(boxes[3][3], body), timeout=30, what="box4 to take a GPU job")
    key, tree = answer["id"], answer["code_tree"]
    assert not [w for w in answer.get("warnings", ()) if "code" in w], answer["warnings"]   # 2 copies, answered
    wait_until(lambda: any(_holding(d, tree) for d in daemons[:3]), timeout=30, what="the second copy")
    placed = wait_until(lambda: (j := listed(client, key)).get("state") == "running" and j, timeout=60,
                        what="the job running")
    runner = int(placed["node"].removeprefix("box"))
    assert runner in (1, 2, 3)

    host4, state4, daemon4, _ = boxes[3]                  # box4 destroyed: killed, cut off, wiped
    crash(host4, daemon4)
    net.cut(4)
    shutil.rmtree(state4)
    destroyed = time.monotonic()
    wait_until(lambda: sum(_holding(d, tree) for d in daemons[:3]) >= 2, timeout=60, interval=0.2,
               what="a new copy of the code on another box")
    copied = time.monotonic() - destroyed

    witness = next(i for i in (1, 2, 3) if i != runner)
    host, _state, daemon, _ = boxes[runner - 1]           # the box running it goes for good
    crash(host, daemon)
    net.cut(runner)
    witness_client = boxes[witness - 1][3]
    rerun = wait_until(lambda: (j := listed(witness_client, key)).get("attempts") == 2
                       and j.get("state") == "success" and j, timeout=90, interval=0.2,
                       what="the rerun to run from its code and end",
                       details=lambda: repr(attempt(witness_client.job, key)))
    third = int(rerun["node"].removeprefix("box"))
    assert third not in (runner, 4)
    log = b"".join(witness_client.logs(key)).decode(errors="replace")
    assert f"attempt 2 read {word} from its code" in log, log
    print(f"code copied again {copied:.1f}s after its origin was destroyed (grace {GRACE:.0f}s); "
          f"the rerun ran on box{third} from its code")
