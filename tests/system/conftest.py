"""Real processes: a real ``floydd`` daemon per test (:func:`tests.harness.processes.box`)
and the real ``floyd`` CLI."""

from __future__ import annotations

import signal

import pytest

from tests.harness.processes import Daemon, box, kill_agents

__all__ = ["Daemon"]


@pytest.fixture
def daemon(tmp_path):
    d = box(tmp_path)
    d.start()
    d.floyd("init", "proj")
    yield d
    if d.proc and d.proc.poll() is None:
        d.kill(signal.SIGTERM)
    kill_agents(d.state)
