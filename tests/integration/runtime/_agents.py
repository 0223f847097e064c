"""Helpers for tests that run real agents (``python -m floydd.agent``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from floydd.agent.sandbox import probe_bwrap
from floydd.agent.spec import AgentSpec
from floydd.agent.status import Status, read_status
from floydd.runtime.spawn import write_spec
from tests.conftest import wait_until

HAVE_BWRAP = probe_bwrap()[0] is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it)")


def make_ws(state: Path, job: str = "p/1", **spec) -> tuple[Path, AgentSpec]:
    project, number = job.split("/")
    ws = state / "jobs" / project / number
    for name in ("code", "input", "output", "home", "tmp"):
        (ws / name).mkdir(parents=True, exist_ok=True)
    spec.setdefault("python_bin", str(Path(sys.executable).parent))
    spec.setdefault("state_dir", str(state))
    agent_spec = AgentSpec(job=job, **spec)
    write_spec(ws, agent_spec)
    return ws, agent_spec


def start_agent(ws: Path, env: dict | None = None) -> subprocess.Popen:
    log = open(ws / "agent.log", "ab")
    with log:
        return subprocess.Popen([sys.executable, "-m", "floydd.agent", str(ws)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def wait_exited(ws: Path, timeout: float = 20.0) -> Status:
    return wait_until(lambda: (s := read_status(ws)) is not None and s.exited and s, timeout=timeout,
                      what=f"agent of {ws} to report exited")


def run_job(state: Path, command: str, job: str = "p/1", **spec) -> tuple[Path, Status, str]:
    """Run ``command`` through a real agent to the end: (workspace, final status, job.log text)."""
    ws, _ = make_ws(state, job, command=command, **spec)
    proc = start_agent(ws)
    status = wait_exited(ws)
    proc.wait(timeout=10)
    log = (ws / "job.log").read_text() if (ws / "job.log").exists() else ""
    return ws, status, log


def texts(log: str, stream: str | None = None) -> list[str]:
    """The text part of job.log lines (optionally of one stream)."""
    out = []
    for line in log.splitlines():
        _, s, text = line.split(" ", 2)
        if stream is None or s == stream:
            out.append(text)
    return out
