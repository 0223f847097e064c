"""A rerun on the same box writes a new log (issue 21: it appended to the earlier attempt's):
``floyd logs P/N`` shows the latest attempt, ``--attempt K`` an earlier one."""

from __future__ import annotations

import json

from tests.conftest import wait_until

FINAL = {"success", "failed", "stopped", "timeout", "lost"}


def test_each_attempt_has_its_own_log_and_the_latest_is_shown_by_default(daemon):
    (daemon.project / "fail.py").write_text(
        "import os\nprint('this is attempt', os.environ['FLOYD_ATTEMPT'], flush=True)\nraise SystemExit(3)\n")
    key = json.loads(daemon.floyd("run", "--restart", "on-failure", "--max-attempts", "2", "--json",
                                  "python fail.py").stdout)["id"]
    job = wait_until(lambda: (j := daemon.client.job(key))["state"] in FINAL and j["attempt"] == 2 and j,
                     timeout=90, what=f"{key} to end its second attempt")
    assert job["state"] == "failed", job
    latest = daemon.floyd("logs", key).stdout
    assert "this is attempt 2" in latest and "attempt 1" not in latest, latest
    first = daemon.floyd("logs", key, "--attempt", "1").stdout
    assert "this is attempt 1" in first and "attempt 2" not in first, first
    assert daemon.floyd("logs", key, "--attempt", "2").stdout == latest
    missing = daemon.floyd("logs", key, "--attempt", "3", check=False)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert f"the log of attempt 3 of {key} is not on this box (the latest is attempt 2" in missing.stderr, missing.stderr
    assert (daemon.state / "jobs" / key / "job.log.1").exists()       # kept beside the latest
