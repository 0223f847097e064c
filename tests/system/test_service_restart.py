"""The daemon restarted the way its service unit does it, while a job runs: the job goes on
and finishes, recorded whole, under the next daemon.

``packaging/units/floydd.service`` has ``KillMode=process``: ``systemctl restart floydd``
sends SIGTERM to the daemon's main pid alone, then starts a new daemon, and the job's agent
(still in the service's control group) is left running. That is done here with real
processes, without systemd: SIGTERM to the daemon's pid, a new daemon on the same state dir.
systemd's default (``control-group``) would kill everything in the group, the agents too;
what is checked of that here is the part floydd itself owns: no agent or job process is in the
daemon's session or process group, so nothing short of the cgroup kill reaches them (a Ctrl-C
in the daemon's terminal, a ``kill -- -PGID`` of its group).

Also the CLI's background daemon: its log rotates, and it is the daemon, not the CLI's
redirection, that writes each line once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from floydd.agent.status import read_status
from floydd.client import Client
from floydd.config import socket_path_for
from floydd.daemon import logs
from floydd.runtime.spawn import alive
from tests.conftest import wait_until

FINAL = {"success", "failed", "stopped", "timeout", "lost"}
JOB = """\
import os, time
out = os.environ["FLOYD_OUTPUT"]
with open(os.path.join(out, "starts"), "a") as f:
    f.write("start\\n")                        # once: the job is not run again after the restart
print("before the restart", flush=True)
deadline = time.monotonic() + 300
while not os.path.exists("go"):               # the test writes it once the new daemon is up
    if time.monotonic() > deadline:
        raise SystemExit("no go file")
    time.sleep(0.02)
with open(os.path.join(out, "model.txt"), "w") as f:
    f.write("weights written after the restart")
print("after the restart", flush=True)
"""


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.slow
def test_a_job_outlives_a_restart_under_killmode_process_and_finishes_whole(daemon, tmp_path):
    (daemon.project / "job.py").write_text(JOB)
    key = json.loads(daemon.floyd("run", "--json", "python job.py").stdout)["id"]
    ws = daemon.state / "jobs" / key
    wait_until(lambda: (ws / "output" / "starts").exists() or daemon.client.job(key)["state"] in FINAL,
               timeout=60, what=f"{key} to start")
    status = read_status(ws)
    assert daemon.client.job(key)["state"] == "running" and alive(status), status
    agent = status.agent_pid

    # what a control-group kill would take and nothing else does: the agent and its job are in
    # no session or process group of the daemon's
    old = daemon.proc.pid
    old_sid, old_pgid = os.getsid(old), os.getpgid(old)
    job_side = _tree(agent)
    assert len(job_side) >= 2, job_side            # the agent and the job under it
    assert {(os.getsid(p.pid), os.getpgid(p.pid)) for p in job_side}.isdisjoint({(old_sid, old_pgid)})
    assert all(os.getsid(p.pid) != old_sid and os.getpgid(p.pid) != old_pgid for p in job_side)

    # systemctl restart under KillMode=process: SIGTERM to the main pid only, then a new daemon
    os.kill(old, signal.SIGTERM)
    assert daemon.proc.wait(timeout=30) == 0       # a clean stop, not a failure for Restart=on-failure
    with pytest.raises(ProcessLookupError):
        os.killpg(old_pgid, 0)                     # nothing is left in the daemon's group to reach
    assert alive(read_status(ws)) and read_status(ws).state == "running", read_status(ws)
    daemon.start()
    assert daemon.proc.pid != old
    (ws / "code" / "go").write_text("go")          # the job waits for it in its working dir

    done = wait_until(lambda: (j := daemon.client.job(key))["state"] in FINAL and j, timeout=60,
                      what=f"{key} to end under the new daemon")
    assert done["state"] == "success" and done["exit_code"] == 0, done
    assert read_status(ws).agent_pid == agent      # the same agent, picked up again
    assert (ws / "output" / "starts").read_text() == "start\n"
    logs_text = daemon.floyd("logs", key).stdout
    assert "before the restart" in logs_text and "after the restart" in logs_text, logs_text
    out = tmp_path / "out"
    daemon.floyd("output", key, str(out))
    assert (out / "model.txt").read_text() == "weights written after the restart"
    assert (out / "starts").read_text() == "start\n"
    # both daemons logged to the state dir's rotated file (user mode) as well as to stderr
    assert daemon.state.joinpath("floydd.log").read_text().count(" serving on ") == 2


def test_the_background_daemon_rotates_its_log_and_writes_each_line_once(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    log = state / "floydd.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)   # a log already at its limit
    with os.fdopen(fd, "w") as f:
        f.write(("an old line of an earlier daemon\n" * (logs.MAX_BYTES // 33 + 1))[:logs.MAX_BYTES - 10])
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state)}
    env.pop("FLOYD_HOST", None)
    pid = None
    try:
        res = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "nodes"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and "started a single-node floydd" in res.stderr, res.stderr
        pid = Client(socket_path_for(state)).info()["pid"]
        wait_until(lambda: (state / "floydd.log.1").exists(), what="the first rotation")
        old = (state / "floydd.log.1").read_text()
        assert old.startswith("an old line") and " serving on " not in old
        current = log.read_text()
        assert current.count(" serving on ") == 1, current     # the daemon's line, once
        assert log.stat().st_size < logs.MAX_BYTES
        # and the daemon's stderr went with the file: what it writes there lands in the current log
        assert os.path.samefile(f"/proc/{pid}/fd/2", log)
    finally:
        subprocess.run([sys.executable, "-m", "floydd.cli.floydd", "stop", "--state-dir", str(state)],
                       env=env, capture_output=True, timeout=60)
        if pid is not None and psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
