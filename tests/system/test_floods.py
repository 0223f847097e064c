"""Floods against a real daemon (issue 20, "Limits"): a 10 KB tar holding a 3 GiB sparse file,
a job writing gigabytes to its log, a job printing metric lines without end, and a person
submitting hundreds of jobs. During each the box answers other people at once (the status
listing in under a second, measured) and no job stays "running" after its process ended."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from floydd.agent.status import read_status
from floydd.client import Client
from floydd.config import socket_path_for
from tests.conftest import wait_until
from tests.floods import LOG_FLOOD, METRIC_FLOOD, sparse_tar
from tests.harness.processes import Daemon, kill_agents

FINAL = {"success", "failed", "stopped", "timeout", "lost"}
ANSWER_WITHIN = 1.0
"""What "the box stays responsive" means: ``floyd status``'s listing answers within this."""


@pytest.fixture
def limited(daemon: Daemon) -> Daemon:
    """The test daemon restarted with small limits (a cap of 4 MiB on job logs, 16 MiB on
    dataset tars, 20 jobs queued per person)."""
    daemon.kill(signal.SIGTERM)
    daemon.env.update(FLOYDD_MAX_LOG_MB="4", FLOYDD_MAX_UPLOAD_GB=str(16 / 1024), FLOYDD_MAX_QUEUED_PER_PERSON="20")
    daemon.start()
    return daemon


class Responsiveness:
    """Lists the jobs as ``floyd status`` does, from another connection, every 0.2 s while a
    flood goes on; the slowest answer is kept."""

    def __init__(self, d: Daemon) -> None:
        self.client = Client(socket_path_for(d.state), timeout=30)
        self.slowest, self.asked = 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-probe", daemon=True)

    def __enter__(self) -> Responsiveness:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        while True:                     # asks at once, then every 0.2 s until the flood is over
            started = time.monotonic()
            self.client.jobs(limit=20)
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.asked += 1
            if self._stop.wait(0.2):
                return

    def check(self, at_least: int = 3) -> None:
        """``at_least``: answers the flood lasted for (a flood over in a moment: one)."""
        assert self.asked >= at_least, "the status probe hardly ran"
        assert self.slowest < ANSWER_WITHIN, f"floyd status took {self.slowest:.2f}s during the flood"


def _run(d: Daemon, command: str, *flags: str) -> str:
    return json.loads(d.floyd("run", "--json", *flags, command).stdout)["id"]


def _workspace(d: Daemon, key: str) -> Path:
    project, number = key.split("/")
    return d.state / "jobs" / project / number


def _final_soon_after_its_end(d: Daemon, key: str, within: float = 5.0, timeout: float = 600) -> dict:
    """Wait for the job to end; assert it was final within ``within`` seconds of its agent
    saying the process ended (the daemon's clock is this machine's)."""
    ws = _workspace(d, key)
    ended = wait_until(lambda: (s := read_status(ws)) is not None and s.exited and s, timeout=timeout,
                       what=f"{key}'s process to end")
    job = wait_until(lambda: (j := d.client.job(key))["state"] in FINAL and j, timeout=within + 60,
                     what=f"{key} to be final")
    assert job["ended"] - ended.ended < within, f"{key} was final {job['ended'] - ended.ended:.1f}s after its " \
                                                "process ended"
    return job


def _post(d: Daemon, path: str, body: bytes, query: str) -> tuple[int, dict]:
    """POST a raw body to the daemon's socket, as a hostile client would (no floyd packing it)."""
    class Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(socket_path_for(d.state)))
    conn = Unix("localhost", timeout=60)
    try:
        conn.request("POST", f"{path}?{query}", body=body, headers={"Content-Type": "application/x-tar"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


# -- a sparse tar ------------------------------------------------------------------------------------

def test_a_10_kb_tar_holding_a_3_gib_sparse_file_is_refused_having_written_nothing(limited):
    archive = sparse_tar(3 << 30)
    assert len(archive) <= 10 * 1024
    uploads = limited.state / "uploads"
    with Responsiveness(limited) as probe:
        for path in ("/v1/datasets/tar", "/v1/code"):
            started = time.monotonic()
            status, answer = _post(limited, path, archive, "name=sparse")
            assert status == 413, answer
            assert time.monotonic() - started < 5.0             # refused, not written then thrown away
            setting = "max_upload_gb" if "datasets" in path else "max_code_mb"
            assert setting in answer["error"]["message"] and "3 GiB" in answer["error"]["message"], answer
        time.sleep(0.7)                                          # the probe asks a few times
    probe.check()
    assert not uploads.exists() or list(uploads.iterdir()) == []
    assert limited.client.datasets("sparse") == []


# -- a log flood -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_job_writing_10_gib_leaves_a_log_at_its_cap_and_is_final_once_it_ended(limited):
    (limited.project / "flood.py").write_text(LOG_FLOOD.format(mib=10 * 1024))
    with Responsiveness(limited) as probe:
        key = _run(limited, "python flood.py")
        job = _final_soon_after_its_end(limited, key)
    probe.check()
    assert job["state"] == "success", job
    log = _workspace(limited, key) / "job.log"
    assert log.stat().st_size < (4 << 20) + 4096
    status = read_status(_workspace(limited, key))
    assert status.log_dropped_bytes >= (10 << 30) - (4 << 20)
    info = limited.floyd("info", key).stdout
    assert f"{status.log_dropped_lines:,} lines (" in info and "dropped: the job's log reached its 4 MiB cap" in info
    tail = limited.floyd("logs", key).stdout.splitlines()[-1]
    assert tail.endswith("the job's log reached its 4 MiB cap (max_log_mb)"), tail


# -- a metric flood ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_metric_flood_is_final_within_seconds_and_recorded_behind_its_end(daemon):
    daemon.kill(signal.SIGTERM)                                  # the default log cap: 256 MiB to record
    daemon.env.update(FLOYDD_MAX_METRIC_POINTS="300000")
    daemon.start()
    lines = 2_000_000                                            # ~ 110 MB of metric lines in its log
    (daemon.project / "metrics.py").write_text(METRIC_FLOOD.format(lines=lines))
    with Responsiveness(daemon) as probe:
        key = _run(daemon, "python metrics.py")
        job = _final_soon_after_its_end(daemon, key)
    probe.check()
    assert job["state"] == "success", job
    log_size = (_workspace(daemon, key) / "job.log").stat().st_size
    assert log_size > 100_000_000
    assert job["metrics"].get("acc", {}).get("last") != -1       # final long before its last line is recorded
    def replicated() -> dict:    # the listing shows an ended job's metrics as the cluster holds them
        return next(j for j in daemon.client.jobs(limit=5) if j["id"] == key)["metrics"]
    metrics = wait_until(lambda: (m := replicated()).get("acc", {}).get("last") == -1 and m,
                         timeout=600, what="the rest of the log to be recorded and the final metrics reported")
    assert metrics["loss"]["last"] == lines - 1
    assert 300_000 <= metrics["loss"]["count"] + metrics["acc"]["count"] <= 300_000 + 2 * (log_size >> 20) + 2
    info = daemon.floyd("info", key).stdout
    assert "reached the cap of 300,000 (max_metric_points)" in info and "metric lines skipped" in info


@pytest.mark.slow
def test_stopping_a_job_that_floods_its_log_with_metrics_is_quick(daemon):
    (daemon.project / "forever.py").write_text(
        "import sys\ni = 0\nwhile True:\n"
        "    sys.stdout.write('{\"metric\": \"loss\", \"value\": %d, \"step\": %d}\\n' % (i, i))\n    i += 1\n")
    key = _run(daemon, "python forever.py")
    log = _workspace(daemon, key) / "job.log"
    wait_until(lambda: log.exists() and log.stat().st_size > 50_000_000, timeout=300,
               what="50 MB of metric lines, far more than is recorded yet")
    assert daemon.client.job(key)["state"] == "running"
    with Responsiveness(daemon) as probe:
        started = time.monotonic()
        said = daemon.floyd("stop", key).stdout
        job = wait_until(lambda: (j := daemon.client.job(key))["state"] in FINAL and j, timeout=60,
                         what="the stopped job to be final")
        took = time.monotonic() - started
    probe.check()
    assert said.startswith(f"job {key}: ") and job["state"] == "stopped", (said, job)
    assert took < 2.0 + 10.0, f"stopping took {took:.1f}s"        # its 2 s grace, and time to say so


# -- a submit flood ----------------------------------------------------------------------------------

def test_a_submit_flood_stops_at_the_persons_limit_with_one_clear_line(limited):
    blocker = _run(limited, "sleep 300", "--gpu", "2")            # holds both GPUs: the rest stay queued
    wait_until(lambda: limited.client.job(blocker)["state"] == "running", timeout=60, what="the first job to run")
    code = limited.project

    def submit(i: int) -> int:
        client = Client(socket_path_for(limited.state), timeout=60)
        try:
            client.submit({"project": "proj", "command": "true", "gpus": 2, "code_path": str(code),
                           "idem_key": f"submit-flood-{i:04d}"})
            return 201
        except Exception as exc:                                  # noqa: BLE001 - the status is checked
            return getattr(exc, "status", 0)
    with Responsiveness(limited) as probe, ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(submit, range(200)))
    probe.check(at_least=1)             # 200 submits may be over in less than a second
    assert sorted(answers) == [201] * 20 + [429] * 180, sorted(set(answers))
    assert len(limited.client.jobs(state="queued")) == 20
    res = limited.floyd("run", "--gpu", "2", "true", check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: ") and "has 20 jobs queued, the lab's limit for one person" in res.stderr
    assert "floyd stop" in res.stderr, res.stderr
    limited.floyd("stop", blocker)
    kill_agents(limited.state)
