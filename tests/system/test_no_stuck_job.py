"""No stuck job, no silent loss, through the real CLI and daemon: metric lines past what the
records hold, --max-runtime out of range, a stop that lands while the job is being prepared,
/output entries a snapshot cannot hold, and a state folder whose disk fills up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from floydd.errors import InvalidSpec
from floydd.runtime.disk import RESERVE_NAME
from tests.conftest import wait_until
from tests.integration.runtime._hostile import (BAD_METRIC_LINES, BAD_OUTPUT, FILL, GOOD_METRIC_LINES,
                                               fill, small_disk)
from tests.harness.processes import Daemon, box, kill_agents

FINAL = {"success", "failed", "stopped", "timeout", "lost"}


WAIT_FOR_GO = """\
while not os.path.exists("go"):
    time.sleep(0.02)
"""
SLEEP = "python -c \"import time\nwhile True: time.sleep(1)\""


def _final(d: Daemon, key: str, timeout: float = 60) -> dict:
    return wait_until(lambda: (j := d.client.job(key))["state"] in FINAL and j, timeout=timeout,
                      what=f"{key} to end", details=lambda: str(d.client.job(key)))


def _run(d: Daemon, command: str, *flags: str) -> str:
    return json.loads(d.floyd("run", "--json", *flags, command).stdout)["id"]


def _workspace(d: Daemon, key: str) -> Path:
    project, number = key.split("/")
    return d.state / "jobs" / project / number


# -- metric lines ------------------------------------------------------------------------------------

def test_metric_lines_past_what_the_records_hold_are_skipped_once_even_across_a_restart(daemon):
    (daemon.project / "bad.py").write_text(BAD_METRIC_LINES + WAIT_FOR_GO + GOOD_METRIC_LINES)
    key = _run(daemon, "python bad.py")
    ws = _workspace(daemon, key)
    wait_until(lambda: daemon.client.job(key)["state"] == "running" and '"high"' in (ws / "job.log").read_text(),
               what="the bad lines to be printed")
    wait_until(lambda: any(e["kind"] == "metrics" for e in daemon.client.job(key).get("events") or ()),
               what="the skipped lines to be counted")
    daemon.kill(signal.SIGKILL)           # the line that froze the job in "running" is behind it
    daemon.start()
    (ws / "code" / "go").write_text("go")
    job = _final(daemon, key)
    assert job["state"] == "success", job
    assert job["metrics"]["loss"]["count"] == 3 and set(job["metrics"]) == {"loss"}
    warnings = [e for e in job["events"] if e["kind"] == "metrics"]
    assert len(warnings) == 1, warnings   # one warning, and the count not doubled by the restart
    assert warnings[0]["message"].startswith("6 metric lines skipped (not recorded); the first: the step "
                                             "does not fit in 64 bits")
    assert "6 metric lines skipped" in daemon.floyd("info", key).stdout
    daemon.floyd("delete", key)


# -- --max-runtime -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "1e300", "0", "-5", "nan", str(31 * 24 * 3600)])
def test_max_runtime_out_of_range_is_one_line_and_nothing_is_submitted(daemon, value):
    res = daemon.floyd("run", "--max-runtime", value, "echo hi", check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: --max-runtime ") and "at most 2592000 (30 days)" in res.stderr, res.stderr
    assert daemon.client.jobs() == []


def test_the_api_refuses_a_max_runtime_past_the_maximum_and_restart_too(daemon):
    with pytest.raises(InvalidSpec, match="30 days"):
        daemon.client.submit({"project": "proj", "command": "true", "code_path": str(daemon.project),
                              "max_runtime": 1e300, "idem_key": "max-runtime-1"})
    key = _run(daemon, "true")
    _final(daemon, key)
    res = daemon.floyd("restart", key, "--max-runtime", "inf", check=False)
    assert res.returncode != 0 and "--max-runtime" in res.stderr and "Traceback" not in res.stderr
    with pytest.raises(InvalidSpec, match="30 days"):
        daemon.client.restart(key, {"max_runtime": 1e300})


def test_a_long_max_runtime_within_the_maximum_runs(daemon):
    key = _run(daemon, "echo fine", "--max-runtime", str(30 * 24 * 3600))   # once overflowed the agent's poll()
    job = _final(daemon, key)
    assert (job["state"], job["reason"]) == ("success", "exit code 0"), job


# -- a stop before the job's process exists -----------------------------------------------------------

@pytest.mark.slow
def test_a_stop_while_the_job_is_being_prepared_means_it_never_runs(daemon, tmp_path):
    wheels = tmp_path / "wheels"            # the site's wheelhouse: the one host folder a (sandboxed) build sees
    wheels.mkdir()
    gate = wheels / "requirements.fifo"     # pip blocks reading it: the job's environment is being built
    os.mkfifo(gate)
    daemon.kill(signal.SIGTERM)
    daemon.env["FLOYDD_WHEELHOUSE"] = str(wheels)
    daemon.start()
    (daemon.project / "floyd_requirements.txt").write_text(f"-r {gate}\n")
    key = _run(daemon, "touch ran")
    ws = _workspace(daemon, key)
    wait_until(lambda: (ws / "job.log").exists() and "building an environment" in (ws / "job.log").read_text(),
               timeout=60, what="the environment build to begin")
    stop = subprocess.Popen([sys.executable, "-m", "floydd.cli.floyd", "stop", key], env=daemon.env,
                            cwd=daemon.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: daemon.client.job(key).get("stop_requested"), what="the stop to be committed")
        fd = os.open(gate, os.O_WRONLY)     # let pip go on (an empty requirements file)
        os.close(fd)
        stop.communicate(timeout=60)
    finally:
        stop.kill()
    job = _final(daemon, key)
    assert (job["state"], job["reason"]) == ("stopped", "stopped by user"), job
    assert not (ws / "code" / "ran").exists() and not (ws / "status.json").exists()


# -- /output --------------------------------------------------------------------------------------------

def test_output_entries_a_snapshot_cannot_hold_are_named_and_the_rest_is_saved(daemon, tmp_path):
    (daemon.project / "out.py").write_text(BAD_OUTPUT)
    key = _run(daemon, "python out.py")
    job = _final(daemon, key)
    assert job["state"] == "success" and job["output_version"] == f"{key}/output:1", job
    out = tmp_path / "out"
    daemon.floyd("output", key, str(out))
    assert sorted(p.name for p in out.iterdir()) == ["model.bin"] and (out / "model.bin").read_text() == "weights"
    info = daemon.floyd("info", key).stdout
    for line in ("/output/pipe is not saved: it is a FIFO (named pipe)", "/output/sock is not saved: it is a socket",
                 "/output/passwd is not saved: it is a link pointing outside /output (to /etc/passwd)",
                 f"/output saved as {key}/output:1 (3 entries skipped)"):
        assert line in info, info
    logs = daemon.floyd("logs", key).stdout
    assert "floydd: /output/pipe is not saved" in logs and "floydd: /output/passwd is not saved" in logs


# -- a full disk -----------------------------------------------------------------------------------------

@pytest.fixture
def small_box(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    with small_disk(tmp_path / "state", "16m") as state:
        d = box(tmp_path, state=state, env={"FLOYDD_SAMPLE_INTERVAL": None})
        d.start()
        d.floyd("init", "proj")
        try:
            yield d
        finally:
            if d.proc and d.proc.poll() is None:
                d.kill(signal.SIGTERM)
            kill_agents(state)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.slow
def test_a_job_filling_the_disk_fails_with_why_and_stop_delete_gc_free_it_for_the_next(small_box, tmp_path):
    d = small_box
    data = tmp_path / "data"
    data.mkdir()
    (data / "blob").write_bytes(os.urandom(2 * 2**20))
    d.floyd("data", "upload", str(data), "--name", "blobs")
    sleeper = _run(d, SLEEP)
    wait_until(lambda: d.client.job(sleeper)["state"] == "running", what="the sleeper to run")
    (d.project / "fill.py").write_text(FILL)
    filler = _run(d, "python fill.py")
    job = _final(d, filler)
    assert job["state"] == "failed" and job["reason"].startswith(f"disk full at {d.state}"), job
    other = _final(d, sleeper)            # every job here ends: whatever writes would take the reserve
    # at the state folder, or at the file whose write found it full first (its samples in records.db)
    assert other["state"] == "failed" and other["reason"].startswith(f"disk full at {d.state}"), other
    assert _free(d.state) < 2**20 and not (d.state / RESERVE_NAME).exists()
    assert "disk full at" in d.floyd("info", filler).stdout

    refused = d.floyd("run", "echo too soon", check=False, timeout=30)   # what was freed is for cleaning up
    assert refused.returncode != 0 and refused.stderr.startswith(f"error: disk full at {d.state}: no new job")
    assert "hint: free space: floyd delete" in refused.stderr
    res = d.floyd("stop", filler, check=False, timeout=30)
    assert res.returncode != 0 and "already ended (failed)" in res.stderr and "Traceback" not in res.stderr
    d.floyd("delete", filler, timeout=30)
    d.floyd("delete", sleeper, timeout=30)
    d.floyd("data", "delete", "blobs", "-y", timeout=30)
    d.floyd("data", "gc", timeout=60)
    assert _free(d.state) > 12 * 2**20
    wait_until(lambda: (d.state / RESERVE_NAME).exists(), what="the reserve to be made again")
    after = _run(d, "echo after")
    assert _final(d, after)["state"] == "success"


@pytest.mark.slow
def test_a_disk_filled_to_the_last_byte_stalls_the_control_plane_which_recovers_once_space_is_freed(small_box):
    d = small_box
    sleeper = _run(d, SLEEP)
    wait_until(lambda: d.client.job(sleeper)["state"] == "running", what="the sleeper to run")
    filler = d.state / "filler"
    fill(filler)                          # something else fills the disk ...
    wait_until(lambda: not (d.state / RESERVE_NAME).exists(), what="the daemon to release its reserve")
    fill(filler)                          # ... and takes the reserve too: nothing can be written now
    stalled = d.floyd("status", check=False, timeout=30)  # the control plane waits for space: it says so
    if stalled.returncode != 0:
        assert "floyd status --stale" in stalled.stderr or "--stale" in stalled.stderr, stalled.stderr
    assert sleeper in d.floyd("status", "--stale", timeout=30).stdout   # and the hint's command works
    filler.unlink()                       # space is freed
    job = _final(d, sleeper, timeout=60)  # what could not be recorded is recorded now
    assert job["state"] == "failed" and job["reason"].startswith(f"disk full at {d.state}"), job
    after = _run(d, "echo after")
    assert _final(d, after)["state"] == "success"
