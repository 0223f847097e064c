"""A real box admits jobs while it has the cores they ask (its own, as its inventory reports
them: no fake CPUs), the rest queue saying why; ``floyd run --cpu N --memory SIZE``."""

from __future__ import annotations

import os

import pytest

from tests.conftest import wait_until

SLEEP = 'python -c "import time; time.sleep(60)"'


def _job(d, key):
    return d.client.job(key)


@pytest.mark.slow
def test_cpu_jobs_queue_for_the_cores_of_the_box(daemon):
    cores = len(os.sched_getaffinity(0))
    half = f"{cores / 2:g}"
    for _ in range(3):
        daemon.floyd("run", "--cpu", half, "--memory", "64M", SLEEP)
    wait_until(lambda: [_job(daemon, f"proj/{n}")["state"] for n in (1, 2)] == ["running"] * 2,
               what="two jobs running")
    waiting = wait_until(lambda: (j := _job(daemon, "proj/3"))["waiting_for"] and j, what="job 3 to wait")
    assert waiting["state"] == "queued" and waiting["resources"]["cpus"] == cores / 2
    assert waiting["waiting_for"].startswith(f"waiting for {half} CPU") and "0 CPUs free" in waiting["waiting_for"]
    assert "0 CPUs free" in daemon.floyd("status").stdout
    refused = daemon.floyd("run", "--cpu", str(cores * 2), "python -c pass", check=False)
    assert refused.returncode != 0 and f"no node has {cores * 2} CPUs" in refused.stderr
    daemon.floyd("stop", "proj/1")
    wait_until(lambda: _job(daemon, "proj/3")["state"] == "running", what="job 3 running once a job stopped")
    for key in ("proj/2", "proj/3"):
        daemon.floyd("stop", key)
