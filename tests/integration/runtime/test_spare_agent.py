"""The spare agent (floydd.runtime.spare): started ahead, it becomes a job's agent exactly as
``python -m floydd.agent WORKSPACE`` would, and never outlives its owner or its idle time."""

from __future__ import annotations

import os
import signal

from floydd.agent.jobenv import agent_env
from floydd.agent.status import read_status
from floydd.runtime import spawn
from floydd.runtime.spare import Spares
from tests.conftest import wait_until
from tests.integration.runtime._agents import make_ws, texts, wait_exited


def _spares(idle: float = 60.0) -> Spares:
    return Spares(agent_env(os.environ), idle=idle)


def _ended(proc) -> bool:
    return proc.poll() is not None


def test_the_spare_runs_the_job_from_its_workspace_and_a_new_spare_follows(state_dir):
    spares = _spares()
    try:
        spares.refill()
        first = spares._spare
        ws, spec = make_ws(state_dir, command="pwd; echo to-err >&2; cat; echo done", sandbox="none")
        handle = spawn.start_agent(ws, spec, spares=spares)
        assert handle.pid == first.pid and handle.process is first, "the spare became the agent"
        status = wait_exited(ws)
        handle.process.wait(timeout=10)
        assert (status.outcome, status.agent_pid) == ("success", first.pid)
        log = (ws / "job.log").read_text()
        assert texts(log, "o") == [str(ws / "code"), "done"], "cwd is the code folder; stdin is empty"
        assert texts(log, "e") == ["to-err"]
        assert "job p/1" in (ws / "agent.log").read_text(), "the agent's own output went to agent.log"
        second = spares._spare
        assert second is not None and second.pid != first.pid and second.poll() is None
    finally:
        spares.close()


def test_a_spare_that_died_is_passed_over_and_the_job_still_runs(state_dir):
    spares = _spares()
    try:
        spares.refill()
        dead = spares._spare
        dead.kill()
        wait_until(lambda: _ended(dead), what="the spare to die")
        ws, spec = make_ws(state_dir, command="echo ran", sandbox="none")
        handle = spawn.start_agent(ws, spec, spares=spares)
        assert handle.pid != dead.pid
        assert wait_exited(ws).outcome == "success"
        handle.process.wait(timeout=10)
    finally:
        spares.close()


def test_a_spare_ends_when_let_go_after_its_idle_time_or_when_its_owner_goes(state_dir):
    spares = _spares(idle=0.3)
    spares.refill()
    idle = spares._spare
    wait_until(lambda: _ended(idle), timeout=10, what="the idle spare to be let go")
    assert idle.returncode == 0 and spares._spare is None
    spares.idle = 60.0
    spares.refill()
    owned = spares._spare
    owned.stdin.close()                   # what the kernel does when the daemon dies, kill -9 included
    wait_until(lambda: _ended(owned), timeout=10, what="the spare to see its owner gone")
    assert owned.returncode == 0
    spares.close()
    spares.refill()
    assert spares._spare is None, "closed: no new spare"


def test_no_spares_when_off_and_a_stop_reaches_a_handed_over_agent(state_dir):
    off = _spares(idle=0)
    off.refill()
    assert off._spare is None
    spares = _spares()
    try:
        spares.refill()
        ws, spec = make_ws(state_dir, command="echo ready; sleep 30", sandbox="none", stop_grace=5)
        handle = spawn.start_agent(ws, spec, spares=spares)
        wait_until(lambda: (s := read_status(ws)) is not None and s.state == "running", what="the job to run")
        assert spawn.request_stop(ws, "stopped by user")
        status = wait_exited(ws)
        assert (status.outcome, status.reason) == ("stopped", "stopped by user")
        handle.process.wait(timeout=10)
        assert handle.process.returncode is not None and handle.process.returncode != -signal.SIGKILL
    finally:
        spares.close()
