"""Jobs across boxes: two real daemons on loopback forming a cluster, driven by the real CLI.

box-a has no GPU, box-b one (fake, dev option): a GPU job submitted on box-a must be placed
on box-b by the leader, run there with the code box-a snapshotted (fetched over mTLS), and
be fully visible from box-a: state, metrics summary, logs, output files; a stop given on
box-a reaches the job running on box-b.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.conftest import wait_until
from tests.harness.processes import box, final, form, kill_agents, pair, status, stop

TRAIN = """\
import json, os, socket
print("training on", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
for step in range(3):
    print(json.dumps({"metric": "loss", "value": 1.0 / (step + 1), "step": step}), flush=True)
with open(os.path.join(os.environ["FLOYD_OUTPUT"], "model.txt"), "w") as f:
    f.write("weights")
"""


@pytest.fixture
def two_boxes(tmp_path):
    yield from pair(tmp_path, {"train.py": TRAIN})


def test_a_gpu_job_submitted_on_one_box_runs_on_the_box_with_the_gpu(two_boxes, tmp_path):
    a, b = two_boxes
    job = json.loads(a.floyd("run", "--gpu", "--json", "python train.py").stdout)
    key = job["id"]
    done = final(a, key)
    assert done["state"] == "success", done
    assert done["node"] == "box-b" and done["gpus"] == [0]
    assert done["metrics"]["loss"]["last"] == pytest.approx(1 / 3)       # the summary reached box-a
    logs = a.floyd("logs", key).stdout
    assert "training on 0" in logs                                      # read from box-b over mTLS
    assert status(b, key)["state"] == "success"                        # one job, seen alike from both
    dest = tmp_path / "fetched"
    a.floyd("output", key, str(dest))
    assert (dest / "model.txt").read_text() == "weights"                # box-b's /output, fetched to box-a
    info = json.loads(a.floyd("info", key, "--json").stdout)
    messages = [e["message"] for e in info["events"]]
    assert any(m.startswith("placed on box-b (GPU 0) by the leader of term") for m in messages), messages
    assert any(e["kind"] == "state" and "running" in e["message"] for e in info["events"])  # box-b's own
    assert "placed on box-b" in a.floyd("info", key).stdout                 # and in the human view


def test_cpu_jobs_spread_and_a_stop_reaches_the_other_box(two_boxes):
    a, b = two_boxes
    (a.project / "wait.py").write_text("import time\nprint('waiting', flush=True)\n"
                                       "print('{\"metric\": \"acc\", \"value\": 0.5}', flush=True)\ntime.sleep(300)\n")
    first = json.loads(a.floyd("run", "--json", "python wait.py").stdout)["id"]
    wait_until(lambda: status(a, first)["state"] == "running", timeout=60, what=f"{first} to run")
    second = json.loads(a.floyd("run", "--json", "python wait.py").stdout)["id"]
    wait_until(lambda: status(a, second)["state"] == "running", timeout=60, what=f"{second} to run")
    assert {status(a, first)["node"], status(a, second)["node"]} == {"box-a", "box-b"}
    remote = first if status(a, first)["node"] == "box-b" else second
    wait_until(lambda: "waiting" in a.floyd("logs", remote).stdout, timeout=30, what="the remote log")
    wait_until(lambda: status(a, remote)["metrics"].get("acc", {}).get("last") == 0.5, timeout=30,
               what="box-b's running job's metrics in box-a's listing")
    a.floyd("stop", remote)
    assert final(a, remote)["state"] == "stopped"
    listed = {j["id"]: j["state"] for j in b.floyd_json("status")}
    assert listed[remote] == "stopped" and first in listed and second in listed


def test_a_box_that_dies_loses_its_running_job_and_the_cluster_carries_on(two_boxes):
    a, b = two_boxes                       # box-a votes; box-b (a learner) has the GPU
    (a.project / "wait.py").write_text("import time\nprint('waiting', flush=True)\ntime.sleep(300)\n")
    key = json.loads(a.floyd("run", "--gpu", "--restart", "never", "--json", "python wait.py").stdout)["id"]
    wait_until(lambda: status(a, key)["state"] == "running", timeout=60, what=f"{key} to run on box-b")
    gpus_b = next(n for n in a.floyd_json("nodes") if n["name"] == "box-b")["gpus"]
    assert [g["job"] for g in gpus_b] == [key]          # box-a knows who holds box-b's GPU
    b.kill()                               # power cut: the daemon and the job's agent die
    kill_agents(b.state)
    lost = final(a, key, timeout=60)
    assert lost["state"] == "lost" and "box box-b was out of touch" in lost["reason"], lost
    after = json.loads(a.floyd("run", "--json", "python train.py").stdout)["id"]
    done = final(a, after)
    assert (done["state"], done["node"]) == ("success", "box-a")


def test_a_box_keeps_its_history_and_datasets_when_it_founds_a_cluster(tmp_path):
    """Single box first (a dataset, a job), then floydd init and a second box: the old job is
    still listed and its number not reused, the dataset is in the cluster catalog, and a job
    placed on the other box mounts it (fetched from the first box)."""
    a, b = box(tmp_path, "box-a"), box(tmp_path, "box-b")
    try:
        a.start("--dev-fake-gpus", "0")
        a.floyd("init", "proj")
        data = tmp_path / "digits"
        data.mkdir()
        (data / "labels.txt").write_text("3 1 4 1 5\n")
        a.floyd("data", "upload", str(data), "--name", "digits")
        (a.project / "train.py").write_text(TRAIN)
        old = json.loads(a.floyd("run", "--json", "python train.py").stdout)["id"]
        assert final(a, old)["state"] == "success"
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(timeout=60)

        form(a, b)
        refs = wait_until(lambda: len(r := {v["ref"] for v in b.floyd_json("data", "ls")}) >= 2 and r, timeout=60,
                          what="the first box's datasets in the cluster catalog")
        assert refs == {"digits:1", "proj/1/output:1"}      # uploads and job outputs alike
        (a.project / "read.py").write_text("print(open('/input/labels.txt').read().strip(), flush=True)\n")
        new = json.loads(a.floyd("run", "--gpu", "--data", "digits:/input", "--json", "python read.py").stdout)["id"]
        assert new == "proj/2"                              # proj/1 is the box's own, still listed
        done = final(a, new)
        assert (done["state"], done["node"]) == ("success", "box-b"), done
        assert "3 1 4 1 5" in a.floyd("logs", new).stdout
        history = {j["id"]: j for j in a.floyd_json("status")}
        assert history[old]["state"] == "success" and history[old]["node"] == "box-a"
    finally:
        stop(a, b)


def test_a_box_restarted_mid_run_reports_its_job_when_back(tmp_path):
    """kill -9 of box-b's daemon while its job runs (the agent lives on): once box-b is
    back it re-adopts the job and box-a sees the job end in success with its output."""
    a, b = box(tmp_path, "box-a"), box(tmp_path, "box-b")
    for one in (a, b):
        one.env["FLOYDD_JOB_LOST_AFTER"] = "120"
    try:
        form(a, b)
        wait_until(lambda: len(a.floyd_json("nodes")) == 2, timeout=60, what="both nodes listed")
        a.floyd("init", "proj")
        (a.project / "slow.py").write_text(      # waits for a file the test drops into its /code
            "import os, time\nprint('started', flush=True)\n"
            "while not os.path.exists(os.path.join(os.environ['FLOYD_CODE'], 'go')):\n"
            "    time.sleep(0.05)\n"
            "open(os.path.join(os.environ['FLOYD_OUTPUT'], 'done'), 'w').write('yes')\nprint('finished')\n")
        key = json.loads(a.floyd("run", "--gpu", "--json", "python slow.py").stdout)["id"]
        wait_until(lambda: status(a, key)["state"] == "running", timeout=60, what=f"{key} running on box-b")
        b.kill()
        (b.state / "jobs" / key / "code" / "go").write_text("")  # the job ends while box-b's daemon is down
        b.start("--dev-fake-gpus", "1")
        done = final(a, key)
        assert (done["state"], done["node"]) == ("success", "box-b"), done
        assert "finished" in a.floyd("logs", key).stdout
        dest = tmp_path / "out"
        a.floyd("output", key, str(dest))
        assert (dest / "done").read_text() == "yes"
    finally:
        stop(a, b)


def test_a_burst_of_quick_jobs_through_both_boxes_all_run_once_to_success(two_boxes):
    """Jobs shorter than one reconcile round, submitted through both boxes' APIs at once: every
    one is placed, run and reported (none stuck in starting), each exactly once."""
    a, b = two_boxes
    (a.project / "quick.py").write_text("print('ok')\n")
    keys = []
    for i in range(24):
        box = (a, b)[i % 2]
        body = {"project": "proj", "command": "python quick.py", "code_path": str(a.project),
                "gpus": 1 if i % 3 == 0 else 0, "idem_key": f"burst-{i:02d}"}
        keys.append(box.client.submit(body)["id"])
    assert len(set(keys)) == 24
    def ended():
        jobs = [j for j in a.floyd_json("status", "--all") if j["id"] in keys]
        return len(jobs) == 24 and all(j["state"] in ("success", "failed", "stopped", "lost") for j in jobs) and jobs
    done = wait_until(ended, timeout=120, interval=0.2, what="the burst to end")
    assert {j["state"] for j in done} == {"success"}, [(j["id"], j["state"], j["reason"]) for j in done]
    assert {j["node"] for j in done} == {"box-a", "box-b"}
