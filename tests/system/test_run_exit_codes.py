"""``floyd run -f`` exits with the job's own exit code, and with floyd's codes for jobs that
timed out or were stopped (:mod:`floydd.cli.exits`), through the real CLI and daemon."""

from __future__ import annotations

import subprocess
import sys

import pytest

from floydd.cli import exits
from tests.conftest import wait_until


@pytest.mark.slow
@pytest.mark.parametrize("command,code", [
    ("python -c pass", exits.OK),
    ("python -c \"import sys; print('bye'); sys.exit(3)\"", 3),
])
def test_run_follow_exits_with_the_jobs_exit_code(daemon, command, code):
    res = daemon.floyd("run", "-f", command, check=False)
    assert res.returncode == code, res.stdout + res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_a_job_past_its_max_runtime_exits_124(daemon):
    res = daemon.floyd("run", "-f", "--max-runtime", "1", "python -c \"import time; time.sleep(60)\"", check=False)
    assert res.returncode == exits.TIMEOUT, res.stdout + res.stderr
    assert "timeout" in res.stderr


@pytest.mark.slow
def test_a_job_stopped_while_followed_exits_143(daemon):
    proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floyd", "run", "-f",
                             "python -c \"import time; print('ready', flush=True); time.sleep(60)\""],
                            env=daemon.env, cwd=daemon.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        key = wait_until(lambda: next((j["id"] for j in daemon.floyd_json("status")), None), timeout=60,
                         what="the job to be submitted")
        wait_until(lambda: "ready" in daemon.floyd("logs", key).stdout, timeout=60, what="the job to print")
        daemon.floyd("stop", key)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exits.STOPPED, out + err
    assert "ready" in out and f"job {key} stopped" in err
