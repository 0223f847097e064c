"""NodeRuntime against what a careless or hostile job does: metric lines the records cannot
hold, /output entries a snapshot cannot hold, a state folder whose disk fills up, a stale
stop from an earlier run. Real agents, real Store and Records."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest

from floydd.agent.status import read_status
from floydd.errors import InvalidSpec
from floydd.runtime import spawn
from floydd.runtime.disk import RESERVE_NAME
from tests.integration.runtime._hostile import (BAD_METRIC_LINES, BAD_OUTPUT, FILL, GOOD_METRIC_LINES, fill,
                                               small_disk)
from tests.integration.runtime.test_node_runtime import Node, ended, node, until  # noqa: F401 (node: the fixture)


async def test_metric_lines_past_what_the_records_hold_are_skipped_counted_and_the_job_ends(node):
    number = node.submit("python bad.py", {"bad.py": BAD_METRIC_LINES + GOOD_METRIC_LINES})
    await node.runtime.start_job("p", number, [])
    job = await ended(node, number)
    assert job["state"] == "success", job
    series = node.records.metric_series("p", number)
    assert list(series) == ["loss"] and [(s, v) for s, v, _ in series["loss"]] == [(0, 1.0), (1, 0.5), (2, 1 / 3)]
    assert node.records.skipped_metrics("p", number) == 6
    warnings = [e for e in node.records.events("p", number) if e["kind"] == "metrics"]
    assert len(warnings) == 1 and warnings[0]["message"].startswith(
        "6 metric lines skipped (not recorded); the first: the step does not fit in 64 bits: ")


async def test_a_batch_the_records_refuse_is_skipped_and_counted_not_retried(node, monkeypatch):
    real, calls = node.records.add_metrics, []

    def refuse_points(project, number, points, **kw):
        points = list(points)
        calls.append(len(points))
        if points:
            raise InvalidSpec("refused", hint="a test")
        return real(project, number, points, **kw)
    monkeypatch.setattr(node.records, "add_metrics", refuse_points)
    number = node.submit("python -c \"print('{\\\"metric\\\": \\\"a\\\", \\\"value\\\": 1}')\"")
    await node.runtime.start_job("p", number, [])
    job = await ended(node, number)
    assert job["state"] == "success" and node.records.skipped_metrics("p", number) == 1
    assert calls.count(1) == 1  # tried once, then skipped


async def test_bad_entries_of_output_are_named_and_skipped_and_the_rest_is_saved(node):
    number = node.submit("python out.py", {"out.py": BAD_OUTPUT})
    await node.runtime.start_job("p", number, [])
    job = await ended(node, number)
    assert job["state"] == "success" and job["output_version"] == f"p/{number}/output:1", job
    back = node.state.parent / "back"
    node.store.restore(node.store.catalog.resolve(job["output_version"]).tree, back)
    assert sorted(p.name for p in back.iterdir()) == ["model.bin"]
    messages = [e["message"] for e in node.records.events("p", number) if e["kind"] == "output"]
    for name, why in (("pipe", "FIFO"), ("sock", "socket"), ("passwd", "outside /output")):
        assert any(m.startswith(f"/output/{name} is not saved: ") and why in m for m in messages), messages
    assert messages[-1] == f"/output saved as p/{number}/output:1 (3 entries skipped)"
    log = (Path(job["workspace"]) / "job.log").read_text()
    assert "floydd: /output/pipe is not saved: it is a FIFO (named pipe)" in log


async def test_a_stop_left_by_an_earlier_attempt_does_not_stop_the_next(node):
    number = node.submit("echo second run", attempt=1)
    ws = node.state / "jobs" / "p" / str(number)
    ws.mkdir(parents=True)
    (ws / ".prepared").write_text(json.dumps({"attempt": "0"}))
    (ws / "stop").write_text(json.dumps({"outcome": "stopped", "reason": "attempt 0 was replaced"}))
    (ws / "status.json").write_text(json.dumps({"agent_pid": 1, "agent_start_time": 0, "state": "exited",
                                                "outcome": "stopped", "reason": "attempt 0 was replaced"}))
    await node.runtime.start_job("p", number, [])
    job = await ended(node, number)
    assert (job["state"], job["reason"]) == ("success", "exit code 0"), job


# -- a state folder on a small disk ------------------------------------------------------------------

@pytest.fixture
async def small(state_dir):
    with small_disk(state_dir / "state", "8m") as state:
        n = Node(state)
        try:
            yield n
        finally:
            await n.runtime.close()
            n.close()


async def test_a_job_filling_the_disk_ends_failed_with_why_and_the_next_runs_once_space_is_freed(small):
    number = small.submit("python fill.py", {"fill.py": FILL})
    await small.runtime.start_job("p", number, [])
    assert (small.state / RESERVE_NAME).exists()                # made at the start: the disk had room
    job = await ended(small, number, timeout=60)
    assert job["state"] == "failed" and job["reason"].startswith(f"disk full at {small.state}"), job
    assert job["reason"].endswith("/job.log") or "exit code 1" in job["reason"], job  # whichever hit it first
    assert not (small.state / RESERVE_NAME).exists()            # released so the failure could be recorded
    assert any("/output was not saved: disk full at" in e["message"] for e in small.records.events("p", number))
    refused = small.submit("echo too soon")
    await small.runtime.start_job("p", refused, [])
    assert small.job(refused)["reason"].startswith(f"disk full at {small.state}: the job was not started")
    (Path(job["workspace"]) / "output" / "big").unlink()        # what floyd delete does
    again = small.submit("echo after")
    await small.runtime.start_job("p", again, [])
    assert (await ended(small, again))["state"] == "success"
    assert (small.state / RESERVE_NAME).exists()                # made again once there was room


async def test_a_log_that_cannot_be_written_ends_the_job_failed_not_lost(small):
    number = small.submit("python -c \"import sys\nwhile True: print('x' * 4000, flush=True)\"")
    await small.runtime.start_job("p", number, [])
    job = await ended(small, number, timeout=60)
    ws = Path(job["workspace"])
    # whichever met the full disk first: the agent's log, or the daemon's records (which asks
    # the agent to write no more, so the reserve it releases is left to record the end)
    assert job["state"] == "failed", job
    assert job["reason"] in (f"disk full at {ws / 'job.log'}", f"disk full at {small.records.path}"), job


async def test_a_stop_for_a_full_disk_ends_the_log_at_once_while_the_job_floods_through_its_grace(node):
    flood = ("python -c \"import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "while True: print('x' * 4000, flush=True)\"")
    number, ws, _ = await _running(node, flood)
    log = ws / "job.log"
    await until(lambda: log.stat().st_size > 1 << 20, what="the job flooding its log")
    before = log.stat().st_size
    assert spawn.request_stop(ws, f"disk full at {node.records.path}", "failed", keep_log=False)
    job = await ended(node, number)      # SIGKILLed after its 2 s grace, flooding all the while
    assert (job["state"], job["reason"]) == ("failed", f"disk full at {node.records.path}"), job
    # at most the MiB or two the agent had read when the signal came, not 2 s of a flood (GBs)
    assert log.stat().st_size - before < 4 << 20, (before, log.stat().st_size)


async def test_metrics_that_cannot_be_recorded_end_the_job_failed(small, monkeypatch):
    real = small.records.add_metrics

    def full(project, number, points, **kw):
        points = list(points)
        if points:
            raise OSError(28, "No space left on device")
        return real(project, number, points, **kw)
    monkeypatch.setattr(small.records, "add_metrics", full)
    number = small.submit("python -c \"import time\nprint('{\\\"metric\\\": \\\"a\\\", \\\"value\\\": 1}', "
                          "flush=True)\ntime.sleep(60)\"")
    await small.runtime.start_job("p", number, [])
    job = await ended(small, number, timeout=60)
    assert (job["state"], job["reason"]) == ("failed", f"disk full at {small.records.path}"), job


async def _running(n: Node, command: str) -> tuple[int, Path, int]:
    """Start ``command``; (job number, workspace, agent pid) once its agent says it runs."""
    number = n.submit(command)
    await n.runtime.start_job("p", number, [])
    ws = Path(n.job(number)["workspace"])
    status = await until(lambda: (s := read_status(ws)) is not None and s.state == "running" and s)
    return number, ws, status.agent_pid


async def test_an_agent_that_vanishes_on_a_full_disk_fails_for_it_though_space_is_back_when_that_is_recorded(
        small, monkeypatch):
    number, _, agent = await _running(small, "sleep 600")
    # no write of the watch's own meets the full disk first (it would end the job itself)
    monkeypatch.setattr(small.records, "add_system_samples", lambda *a, **kw: None)
    filler = small.state / "filler"
    fill(filler)
    real = small.records.update_job

    def freed_meanwhile(*args, **kw):  # the records wait for space (the control plane does) and someone frees it
        filler.unlink(missing_ok=True)
        return real(*args, **kw)
    monkeypatch.setattr(small.records, "update_job", freed_meanwhile)
    os.kill(agent, signal.SIGKILL)     # the agent vanishes while nothing can be written
    job = await ended(small, number)
    assert not filler.exists() and job["state"] == "failed", job   # not lost: no rerun for a full disk
    assert job["reason"].startswith(f"disk full at {small.state} (the job's agent (pid {agent}) vanished"), job


async def test_a_job_ended_for_a_full_disk_fails_though_its_stop_file_could_not_be_written(node, monkeypatch):
    number, ws, _ = await _running(node, "sleep 600")

    def no_room(*args, **kw):          # what the daemon freed was taken again before the stop file was written
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(spawn, "write_stop", no_room)
    monkeypatch.setattr(node.runtime.disk, "check", lambda release=True: True)   # the disk is full
    await node.runtime.end_for_full_disk()
    job = await ended(node, number)
    assert read_status(ws).outcome == "stopped"   # the agent was signalled, never told why
    assert (job["state"], job["reason"]) == ("failed", f"disk full at {node.state}"), job


async def test_a_full_disk_tells_every_agent_to_stop_logging_before_the_reserve_is_released(node, monkeypatch):
    number, ws, _ = await _running(node, "sleep 600")
    order, real_stop = [], spawn.request_stop

    def stop(*args, **kw):
        order.append(("stop", kw.get("keep_log")))
        return real_stop(*args, **kw)

    def check(release=True):           # the disk is full
        order.append(("check", release))
        return True
    monkeypatch.setattr(spawn, "request_stop", stop)
    monkeypatch.setattr(node.runtime.disk, "check", check)
    await node.runtime.end_for_full_disk()
    assert order == [("check", False), ("stop", False), ("check", True)]
    assert json.loads((ws / "stop").read_text())["log"] is False
    job = await ended(node, number)
    assert (job["state"], job["reason"]) == ("failed", f"disk full at {node.state}"), job
