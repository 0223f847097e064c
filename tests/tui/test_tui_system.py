"""Against a real daemon running a real job (slow: real processes).

The job shows on the cluster screen on its (fake) GPU and on the jobs screen;
its detail screen's log tail and loss curve grow; stop from the TUI stops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from floydd.tui.app import FloydTop
from floydd.tui.connection import Reconnecting
from floydd.tui.screens.confirm import Confirm
from floydd.tui.screens.job_detail import JobDetailScreen
from floydd.tui.widgets.chart import LineChart
from floydd.tui.widgets.table import RowTable
from textual.widgets import RichLog
from tests.conftest import wait_until
from tests.tui.conftest import SIZE, until

TRAIN = """\
import json, time
for step in range(100000):
    print(json.dumps({"metric": "loss", "value": 1.0 / (step + 1), "step": step}), flush=True)
    print(f"epoch {step}", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state, project = tmp_path / "state", tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state), "FLOYDD_TAIL_INTERVAL": "0.05",
           "FLOYDD_STOP_GRACE": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("FLOYD_HOST", None)
    for key in ("FLOYDD_STATE_DIR", "FLOYD_HOST"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FLOYDD_STATE_DIR", str(state))
    with open(tmp_path / "daemon.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state),
                                 "--dev-fake-gpus", "2"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    client = Client(socket_path_for(state))
    try:
        wait_until(lambda: client.ping() or proc.poll() is not None, timeout=30, what="the daemon")
        for args in (["init", "proj"], ["run", "--gpu", "python train.py"]):
            subprocess.run([sys.executable, "-m", "floydd.cli.floyd", *args], env=env, cwd=project, check=True,
                           capture_output=True, timeout=120)
        yield client
    finally:
        try:
            client.stop("proj/1")
        except Exception:  # noqa: BLE001 - already stopped, or the daemon is gone
            pass
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
async def test_a_real_job_live_in_the_tui_and_stopped_from_it(daemon: Client) -> None:
    app = FloydTop(Reconnecting(), refresh=0.2)  # finds the daemon as `floyd top` does
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot and app.snapshot.reachable and app.snapshot.jobs,
                    timeout=60, what="the job running")
        table = app.screen.query_one(RowTable)
        await until(pilot, lambda: any(isinstance(r.cells[-1], tuple) and r.cells[-1][0].startswith("proj/1")
                                       for r in table.rows), what="the job on its GPU")
        await pilot.press("2")
        await until(pilot, lambda: app.snapshot.all_jobs and app.screen.query_one(RowTable).cursor_key == "proj/1")
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen.query_one(LineChart)._series,
                    timeout=30, what="the loss curve")
        log, chart = app.screen.query_one(RichLog), app.screen.query_one(LineChart)
        lines, points = len(log.lines), len(chart._series[0].points)
        await until(pilot, lambda: len(log.lines) > lines + 2 and len(chart._series[0].points) > points + 1,
                    timeout=30, what="the log and the curve to grow")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        await until(pilot, lambda: daemon.job("proj/1")["state"] == "stopped", timeout=30, what="the stop")
        await until(pilot, lambda: app.snapshot.detail.job.state == "stopped")
