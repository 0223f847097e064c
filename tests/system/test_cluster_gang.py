"""Distributed jobs over two boxes: real daemons on loopback, real torchrun, gloo on CPUs.

``floyd run --nodes 2 "python ddp.py"`` on box-a: the leader places both parts at once, the
box given rank 0 commits the rendezvous, both boxes start the script under torchrun, and the
two processes (one per box) all-reduce a tensor across the boxes. A part that fails ends
the whole gang: the other box stops its part.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import wait_until
from tests.harness.processes import final, pair, status

pytestmark = pytest.mark.slow

DDP = """\
import json, os, sys
import torch
import torch.distributed as dist

if os.environ.get("FAIL_RANK") == os.environ["FLOYD_NODE_RANK"]:
    print("this part fails on purpose", flush=True)
    sys.exit(3)
dist.init_process_group("gloo")
if os.environ.get("HOLD"):
    print("holding", flush=True)
    dist.barrier()
    import time
    time.sleep(600)
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank} of {world} on box rank {os.environ['FLOYD_NODE_RANK']}: sum {total.item():g}", flush=True)
if rank == 0:
    print(json.dumps({"metric": "sum", "value": total.item()}), flush=True)
    with open(os.path.join(os.environ["FLOYD_OUTPUT"], "world.txt"), "w") as f:
        f.write(str(world))
dist.destroy_process_group()
"""


@pytest.fixture
def two_boxes(tmp_path):
    yield from pair(tmp_path, {"ddp.py": DDP})


def test_a_job_over_two_boxes_all_reduces_across_them(two_boxes, tmp_path):
    a, b = two_boxes
    job = json.loads(a.floyd("run", "--nodes", "2", "--json", "python ddp.py").stdout)
    key = job["id"]
    done = final(a, key, timeout=180)
    assert done["state"] == "success", (done, a.floyd("logs", key).stdout)
    parts = done["parts"]
    assert sorted(p["node"] for p in parts) == ["box-a", "box-b"] and [p["rank"] for p in parts] == [0, 1]
    assert all(p["state"] == "success" for p in parts)
    assert done["metrics"]["sum"]["last"] == 3.0                       # 1 + 2: both boxes took part
    assert done["endpoint"].startswith("127.0.0.1:")
    rank0 = next(p["node"] for p in parts if p["rank"] == 0)
    assert "rank 0 of 2 on box rank 0: sum 3" in a.floyd("logs", key).stdout       # rank 0's log
    dest = tmp_path / "fetched"
    a.floyd("output", key, str(dest))
    assert (dest / "world.txt").read_text() == "2"
    info = a.floyd("info", key).stdout
    assert f"rank 0 on {rank0}" in info and "placed on box-" in info
    assert status(b, key)["state"] == "success"
    table = a.floyd("status").stdout                       # NODE column: rank 0's box and how many more
    assert f"{rank0} +1" in table, table


def test_a_failing_part_ends_the_gang_and_the_other_box_stops_its_part(two_boxes):
    a, b = two_boxes
    job = json.loads(a.floyd("run", "--nodes", "2", "--param", "FAIL_RANK=1", "--json", "python ddp.py").stdout)
    key = job["id"]
    done = final(a, key, timeout=180)
    assert done["state"] == "failed", done
    assert done["reason"].startswith("rank 1 on box-"), done["reason"]
    wait_until(lambda: {p["rank"]: p["state"] for p in status(a, key)["parts"]}[0] == "stopped", timeout=60,
               what="rank 0 stopped by its box")
    for box in (a, b):                                   # the failing part's log, from either box
        assert "this part fails on purpose" in box.floyd("logs", key, "--rank", "1").stdout
    assert "this part fails on purpose" not in a.floyd("logs", key).stdout
    res = a.floyd("logs", key, "--rank", "5", check=False)
    assert res.returncode != 0 and "has no rank 5" in res.stderr and "Traceback" not in res.stderr


def test_floyd_stop_stops_every_part_of_a_gang(two_boxes):
    a, b = two_boxes
    key = json.loads(a.floyd("run", "--nodes", "2", "--param", "HOLD=1", "--json", "python ddp.py").stdout)["id"]
    wait_until(lambda: status(a, key)["state"] == "running" and "holding" in a.floyd("logs", key).stdout,
               timeout=120, what="both parts running")
    b.floyd("stop", key)                                    # from the other box
    done = final(a, key, timeout=60)
    assert done["state"] == "stopped", done
    wait_until(lambda: [p["state"] for p in status(a, key)["parts"]] == ["stopped", "stopped"], timeout=60,
               what="both parts stopped")


def test_gangs_that_cannot_fit_or_cannot_run_under_torchrun_are_refused_at_once(two_boxes):
    a, _ = two_boxes
    res = a.floyd("run", "--nodes", "2", "--gpu", "python ddp.py", check=False)
    assert res.returncode != 0 and "it needs 2 nodes with 1 GPU each" in res.stderr, res.stderr
    res = a.floyd("run", "--nodes", "3", "python ddp.py", check=False)
    assert res.returncode != 0 and "it needs 3 nodes, the cluster has 2" in res.stderr, res.stderr
    res = a.floyd("run", "--nodes", "2", "bash run.sh", check=False)
    assert res.returncode != 0 and "must start with python or torchrun" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
