"""GPU fencing finds a box's job processes by their environment, whatever became of their agent:
a worker that left the job's session is found, a process of another box (another state
folder on the same machine) is not, and only runs nobody holds are killed."""

from __future__ import annotations

import os
import subprocess
import sys

from floydd.runtime import fence
from tests.conftest import wait_until


def _run(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                            env={**os.environ, **env})


def test_runs_are_found_by_box_job_attempt_and_gpus_and_strays_killed(tmp_path):
    mine, theirs = tmp_path / "a", tmp_path / "b"
    procs = [_run({"FLOYD_JOB": "p/1", "CUDA_VISIBLE_DEVICES": "0,1", **fence.placement_env(mine, 1)}),
             _run({"FLOYD_JOB": "p/2", "CUDA_VISIBLE_DEVICES": "", **fence.placement_env(mine, 3)}),
             _run({"FLOYD_JOB": "p/1", "CUDA_VISIBLE_DEVICES": "0", **fence.placement_env(theirs, 1)})]
    try:
        runs = wait_until(lambda: len(r := fence.scan(mine)) == 2 and r, timeout=10, what="two runs")
        assert {k: v["gpus"] for k, v in runs.items()} == {("p/1", 1): {0, 1}, ("p/2", 3): set()}
        assert runs[("p/1", 1)]["pids"] == [procs[0].pid]
        assert fence.live_runs(mine) == [{"job": "p/1", "attempt": 1, "gpus": [0, 1]},
                                         {"job": "p/2", "attempt": 3, "gpus": []}]
        assert fence.taken(runs, "p/1", 2, [1]) == ["p/1 (attempt 1)"]     # an older attempt of the same job
        assert fence.taken(runs, "p/1", 1, [0]) == [] and fence.taken(runs, "p/3", 1, [2]) == []
        assert fence.kill({("p/1", 1): runs[("p/1", 1)]}) == 1
        assert procs[0].wait(10) == -9 and procs[1].poll() is None and procs[2].poll() is None
        assert set(fence.scan(mine)) == {("p/2", 3)}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
