"""The agent as a real process: outcomes, logs, environment, sandbox, survival."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from floydd.agent.spec import BindMount
from floydd.agent.status import read_status
from floydd.runtime import spawn
from floydd.runtime.tail import read_chunk
from tests.conftest import wait_until
from tests.integration.runtime._agents import make_ws, needs_bwrap, run_job, start_agent, texts, wait_exited
from tests.integration.runtime._hostile import small_disk

PY = sys.executable


@pytest.mark.parametrize("sandbox", ["none", pytest.param("bwrap", marks=needs_bwrap)])
def test_success_keeps_stamped_lines_marks_stderr_and_flushes_the_partial_line(state_dir, sandbox):
    before = time.time()
    ws, status, log = run_job(state_dir, "echo one; echo two >&2; echo three; printf 'no newline'",
                              sandbox=sandbox)
    assert (status.outcome, status.exit_code, status.reason, status.sandbox) == ("success", 0, "exit code 0", sandbox)
    assert status.job_pid and before <= status.started <= status.ended <= time.time()
    assert texts(log, "o") == ["one", "three", "no newline"]
    assert texts(log, "e") == ["two"]
    for line in log.splitlines():
        ts, stream, _ = line.split(" ", 2)
        assert stream in ("o", "e") and len(ts.split(".")[1]) == 6
        assert before - 1 <= float(ts) <= time.time()


def test_failure_reports_the_exit_code(state_dir):
    _, status, log = run_job(state_dir, "echo doomed; exit 3", sandbox="none")
    assert (status.outcome, status.exit_code, status.reason) == ("failed", 3, "exit code 3")
    assert texts(log) == ["doomed"]


def test_a_job_killed_by_a_signal_says_which(state_dir):
    _, status, _ = run_job(state_dir, "kill -KILL $$", sandbox="none")
    assert (status.outcome, status.signal) == ("failed", "SIGKILL")
    assert status.reason.startswith("killed by SIGKILL")


def test_max_runtime_ends_the_job_as_timeout(state_dir):
    started = time.monotonic()
    _, status, log = run_job(state_dir, "echo started; sleep 30", sandbox="none", max_runtime=0.5, stop_grace=5)
    assert (status.outcome, status.reason) == ("timeout", "exceeded --max-runtime 0.5s")
    assert time.monotonic() - started < 10  # SIGTERM ended it, not the grace period or the sleep
    assert texts(log) == ["started"]


_GRACEFUL = ("trap 'echo got-term; exit 0' TERM; echo ready; "
             "while true; do sleep 0.05; done")


@pytest.mark.parametrize("sandbox", ["none", pytest.param("bwrap", marks=needs_bwrap)])
def test_sigterm_to_the_agent_stops_the_job_gracefully_with_the_reason_given(state_dir, sandbox):
    ws, _ = make_ws(state_dir, command=_GRACEFUL, sandbox=sandbox, stop_grace=20)
    proc = start_agent(ws)
    wait_until(lambda: "ready" in (ws / "job.log").read_text() if (ws / "job.log").exists() else False,
               what="the job to start")
    assert spawn.request_stop(ws, "stopped by user")
    status = wait_exited(ws)
    proc.wait(timeout=10)
    assert (status.outcome, status.reason) == ("stopped", "stopped by user")
    # the job got SIGTERM first (it ran its trap and exited 0), not the grace period's SIGKILL
    assert "got-term" in texts((ws / "job.log").read_text())
    assert status.exit_code == 0 and status.ended - status.started < 15


def test_a_job_ignoring_sigterm_is_killed_after_the_grace(state_dir):
    ws, _ = make_ws(state_dir, command="trap '' TERM; echo ready; sleep 30", sandbox="none", stop_grace=0.3)
    proc = start_agent(ws)
    wait_until(lambda: (ws / "job.log").exists() and "ready" in (ws / "job.log").read_text(), what="job start")
    os.kill(proc.pid, signal.SIGTERM)  # no stop file: the reason is plain "stopped"
    status = wait_exited(ws)
    assert (status.outcome, status.reason, status.signal) == ("stopped", "stopped", "SIGKILL")


def test_a_stop_file_before_the_start_means_the_job_never_runs(state_dir):
    ws, _ = make_ws(state_dir, command="touch ran", sandbox="none")
    (ws / "stop").write_text("deleted")
    start_agent(ws)
    status = wait_exited(ws)
    assert (status.outcome, status.reason, status.job_pid) == ("stopped", "deleted", None)
    assert not (ws / "code" / "ran").exists()


def test_processes_left_behind_end_with_the_job(state_dir):
    ws, status, _ = run_job(state_dir, "sleep 60 & echo $! > bg.pid; echo main done", sandbox="none")
    assert status.outcome == "success"
    pid = int((ws / "code" / "bg.pid").read_text())
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
               what="the background sleep to be gone")


_ENV_PROBE = (PY + " -c \"import os, json; print(json.dumps({k: os.environ.get(k) for k in "
              "['CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'FLOYD_JOB', 'PYTHONUNBUFFERED', 'LR', "
              "'FLOYD_CODE', 'FLOYD_INPUT', 'FLOYD_OUTPUT', 'HOME', 'FLOYDD_SECRET']} | {'cwd': os.getcwd()}))\"")


@pytest.mark.parametrize("gpus,expected", [((1, 3), "1,3"), ((), "")])
def test_the_job_sees_exactly_its_gpus_and_its_env(state_dir, gpus, expected, monkeypatch):
    monkeypatch.setenv("FLOYDD_SECRET", "daemon-only")
    _, status, log = run_job(state_dir, _ENV_PROBE, sandbox="none", gpu_ids=gpus, env={"LR": "0.1"})
    seen = json.loads(texts(log, "o")[0])
    assert status.outcome == "success"
    assert seen["CUDA_VISIBLE_DEVICES"] == expected  # set, and empty when no GPU is held
    assert (seen["CUDA_DEVICE_ORDER"], seen["FLOYD_JOB"], seen["PYTHONUNBUFFERED"], seen["LR"]) == \
        ("PCI_BUS_ID", "p/1", "1", "0.1")
    assert seen["FLOYDD_SECRET"] is None


def test_without_sandbox_floyd_paths_point_into_the_workspace(state_dir):
    ws, status, log = run_job(state_dir, _ENV_PROBE, sandbox="none")
    seen = json.loads(texts(log, "o")[0])
    assert (seen["FLOYD_CODE"], seen["FLOYD_INPUT"], seen["FLOYD_OUTPUT"], seen["HOME"], seen["cwd"]) == \
        (str(ws / "code"), str(ws / "input"), str(ws / "output"), str(ws / "home"), str(ws / "code"))


@needs_bwrap
def test_in_the_sandbox_input_is_read_only_output_writable_and_paths_are_floydhubs(state_dir):
    ws, _ = make_ws(state_dir, command=(
        "cat /input/a.txt; "
        "if echo x > /input/new.txt; then echo INPUT-WRITABLE; else echo input-refused; fi; "
        "if echo x > /data/new.txt; then echo DATA-WRITABLE; else echo data-refused; fi; "
        "echo result > /output/r.txt && echo output-ok; "
        "echo $FLOYD_CODE $FLOYD_INPUT $FLOYD_OUTPUT $HOME; pwd; "
        f"{PY} -c 'import floydd.agent.sdk; print(\"sdk-ok\")'"),
        sandbox="bwrap", mounts=(BindMount(source="data", target="/data"),))
    (ws / "input" / "a.txt").write_text("hello\n")
    (ws / "data").mkdir()
    proc = start_agent(ws)
    status = wait_exited(ws)
    proc.wait(timeout=10)
    out = texts((ws / "job.log").read_text(), "o")
    assert status.outcome == "success", (ws / "job.log").read_text()
    assert out[:4] == ["hello", "input-refused", "data-refused", "output-ok"]
    assert out[4:] == ["/code /input /output /home/floyd", "/code", "sdk-ok"]
    assert (ws / "output" / "r.txt").read_text() == "result\n"
    assert not (ws / "input" / "new.txt").exists()


@needs_bwrap
def test_in_the_sandbox_a_job_cannot_see_another_jobs_workspace(state_dir):
    other, _ = make_ws(state_dir, "q/7", command="true")
    (other / "output" / "secret").write_text("s3cret")
    _, status, log = run_job(state_dir, f"ls {other}; cat {other}/output/secret; ls {state_dir}; "
                                        f"ls {state_dir}/jobs", sandbox="bwrap")
    assert "s3cret" not in log and "secret" not in texts(log, "o")
    assert status.outcome == "failed"  # every read of the other job failed
    assert any("No such file" in t for t in texts(log, "e"))


def test_the_agent_outlives_the_process_that_started_it(state_dir):
    ws, _ = make_ws(state_dir, command="sleep 1; echo finished", sandbox="none")
    launcher = (
        "import subprocess, sys; "
        f"p = subprocess.Popen([sys.executable, '-m', 'floydd.agent', {str(ws)!r}], start_new_session=True, "
        "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)")
    res = subprocess.run([PY, "-c", launcher], capture_output=True, text=True, timeout=30, check=True)
    parent_gone = time.time()
    agent_pid = int(res.stdout)
    status = wait_exited(ws)
    assert status.agent_pid == agent_pid
    assert status.ended > parent_gone  # it ran to the end after its parent was gone
    assert (status.outcome, texts((ws / "job.log").read_text())) == ("success", ["finished"])


def test_metric_lines_printed_by_the_sdk_are_parsed_from_the_log(state_dir):
    ws, status, _ = run_job(state_dir, f"{PY} -c \"from floydd.agent.sdk import log\n"
                                       "for i in range(3): log('loss', 1 / (i + 1), step=i)\nprint('plain')\"",
                            sandbox="none")
    chunk = read_chunk(ws / "job.log", 0)
    assert [(m.name, m.value, m.step) for m in chunk.metrics] == [("loss", 1.0, 0), ("loss", 0.5, 1),
                                                                  ("loss", pytest.approx(1 / 3), 2)]
    assert [line.text for line in chunk.lines][-1] == "plain"
    assert chunk.offset == (ws / "job.log").stat().st_size


def test_a_missing_spec_is_a_failed_status_not_a_crash(state_dir):
    ws = state_dir / "jobs" / "p" / "9"
    ws.mkdir(parents=True)
    start_agent(ws)
    status = wait_exited(ws)
    assert status.outcome == "failed" and "spec.json" in status.reason
    assert read_status(ws).agent_pid == status.agent_pid


def test_without_pidfd_the_agent_polls_and_still_gets_everything_right(state_dir):
    ws, _ = make_ws(state_dir, command="sleep 60 & echo $! > bg.pid; echo out; exit 4", sandbox="none")
    code = ("import os, sys; del os.pidfd_open\n"
            "from floydd.agent.supervisor import main\n"
            "sys.exit(main(sys.argv[1:]))")
    subprocess.run([PY, "-c", code, str(ws)], stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=True)
    status = read_status(ws)
    assert (status.outcome, status.exit_code) == ("failed", 4)
    assert texts((ws / "job.log").read_text()) == ["out"]
    pid = int((ws / "code" / "bg.pid").read_text())
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
               what="the background sleep to be gone")


def test_an_agent_whose_disk_fills_up_while_it_starts_still_says_how_the_job_ended(state_dir):
    # a loaded box: the agent's python is slow to start, and the disk fills up before it writes
    # anything (not even its first status.json): it writes in the room the daemon made for it
    with small_disk(state_dir / "state", "4m") as state:
        ws, spec = make_ws(state, command="echo dropped", sandbox="none")
        (ws / "job.log").touch()                 # as the workspace is prepared
        slow = state_dir / "python"
        slow.write_text(f"#!/bin/sh\n{shutil.which('cat')} /dev/zero > {state / 'filler'} 2>/dev/null\n"
                        f'exec {PY} "$@"\n')
        slow.chmod(0o755)
        agent = spawn.start_agent(ws, spec, python=str(slow))
        agent.process.wait(timeout=30)
        assert os.statvfs(state).f_bavail == 0   # filled to the last byte while it ran
        status = read_status(ws)
        assert status is not None and status.exited, f"the agent vanished without a word: {status}"
        assert (status.outcome, status.reason) == ("failed", f"disk full at {ws / 'job.log'}")
        assert status.agent_pid == agent.pid and status.job_pid


def test_a_job_log_that_cannot_be_opened_is_a_failed_status_not_a_crash(state_dir):
    ws, _ = make_ws(state_dir, command="touch ran", sandbox="none")
    (ws / "job.log").mkdir()
    start_agent(ws)
    status = wait_exited(ws)
    assert status.outcome == "failed" and status.reason.startswith("cannot open job.log: "), status
    assert not (ws / "code" / "ran").exists()
