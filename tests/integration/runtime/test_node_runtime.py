"""NodeRuntime end to end with the real Store and Records and real agents."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from floydd.agent.status import read_status
from floydd.records import Records
from floydd.runtime import NodeRuntime
from floydd.runtime.spawn import alive
from floydd.store import Store
from tests.conftest import wait_until_async
from tests.harness.leftovers import kill, started_in

PY = sys.executable

TRAIN = """\
import json, os, sys, time
from floydd.agent.sdk import log
inp, out = os.environ["FLOYD_INPUT"], os.environ["FLOYD_OUTPUT"]
print("data says", open(os.path.join(inp, "numbers.txt")).read().strip())
print("gpus", repr(os.environ["CUDA_VISIBLE_DEVICES"]), "lr", os.environ["lr"])
for step in range(5):
    log("loss", 1.0 / (step + 1), step=step)
print("oops", file=sys.stderr)
open(os.path.join(out, "model.bin"), "wb").write(b"weights")
"""

WAIT_FOR_GO = """\
import os, sys, time
from floydd.agent.sdk import log
log("acc", 0.1, step=0)
print("waiting", flush=True)
while not os.path.exists("go"):
    time.sleep(0.02)
log("acc", 0.9, step=1)
open(os.path.join(os.environ["FLOYD_OUTPUT"], "done"), "w").write("yes")
"""


class Node:
    """One runtime over a real store and records in ``state``; reopen() simulates a new daemon."""

    def __init__(self, state: Path, sandbox: str = "auto") -> None:
        self.state, self.sandbox = state, sandbox
        self.store = Store.open(state / "store")
        self.records = Records(state / "records.db")
        self.finished: list[tuple[str, int]] = []
        self.runtime = self._runtime()

    def _runtime(self) -> NodeRuntime:
        return NodeRuntime(state_dir=self.state, store=self.store, records=self.records, sandbox=self.sandbox,
                           sample_interval=0.1, tail_interval=0.05, stop_grace=2.0,
                           on_finished=lambda p, n: self.finished.append((p, n)))

    def reopen(self) -> None:
        self.runtime = self._runtime()

    def submit(self, command: str, files: dict[str, str] | None = None, *, data: list[dict] | None = None,
               project: str = "p", **fields) -> int:
        code = self.state.parent / f"code-{time.monotonic_ns()}"
        code.mkdir()
        for name, text in (files or {}).items():
            (code / name).write_text(text)
        tree = self.store.snapshot(code)
        values = dict(command=command, params={}, code_tree=str(tree), data=data or [],
                      resources={"gpus": 0}, env="default", max_runtime=None)
        values.update(fields)
        return self.records.allocate_job(project, values)

    def upload(self, name: str, files: dict[str, str]) -> dict:
        src = self.state.parent / f"data-{name}-{time.monotonic_ns()}"
        src.mkdir()
        for fname, text in files.items():
            (src / fname).write_text(text)
        version = self.store.upload(src, name)
        return {"ref": version.ref, "tree": str(version.tree)}

    def job(self, number: int, project: str = "p") -> dict:
        return self.records.get_job(project, number)

    def close(self) -> None:
        """Close; agents a failed test left running are killed, and what is left of a job whose
        agent vanished (a sandbox outlives an agent killed under it)."""
        for job in self.records.list_jobs():
            status = read_status(Path(job["workspace"])) if job.get("workspace") else None
            if alive(status):
                os.kill(status.agent_pid, signal.SIGKILL)
        kill(started_in(self.state))     # a sandbox can outlive its agent, out of the job's process group
        self.records.close()
        self.store.close()


@pytest.fixture
async def node(state_dir):
    # the code and data sources live next to the state dir, not inside it
    state = state_dir / "state"
    state.mkdir()
    n = Node(state)
    yield n
    await n.runtime.close()
    n.close()


async def until(cond, timeout: float = 20.0, what: str = "condition"):
    return await wait_until_async(cond, timeout, interval=0.02, what=what, in_thread=True)


async def ended(node: Node, number: int, timeout: float = 20.0) -> dict:
    """Wait until the job has a final state and the runtime has let go of it."""
    job = await until(final(node, number), timeout=timeout, what=f"job {number} to end")
    await wait_until_async(lambda: ("p", number) not in node.runtime.running(), timeout,
                           what="the runtime to let go of a job that ended")
    return job


def final(node: Node, number: int):
    return lambda: (j := node.job(number))["state"] in ("success", "failed", "stopped", "timeout", "lost") and j


async def test_a_job_runs_and_its_metrics_logs_samples_and_output_are_recorded(node):
    mount = node.upload("numbers", {"numbers.txt": "1 2 3\n"})
    number = node.submit("python train.py", {"train.py": TRAIN}, data=[{**mount, "mount": "/input"}],
                         params={"lr": "0.5"})
    await node.runtime.start_job("p", number, [1, 2])
    assert node.job(number)["state"] == "running"
    assert node.runtime.running().get(("p", number)) in ([1, 2], None)  # None: it may be over already
    job = await ended(node, number)
    ws = Path(job["workspace"])
    log = (ws / "job.log").read_text()
    assert job["state"] == "success", log + (ws / "agent.log").read_text()
    assert (job["exit_code"], job["reason"], job["gpus"]) == (0, "exit code 0", [1, 2])
    assert "data says 1 2 3" in log and "gpus '1,2' lr 0.5" in log and " e oops" in log
    series = node.records.metric_series("p", number)
    assert [(step, value) for step, value, _ in series["loss"]] == [(i, 1.0 / (i + 1)) for i in range(5)]
    assert job["output_version"] == f"p/{number}/output:1"
    out = node.state.parent / "restored"
    node.store.restore(node.store.catalog.resolve(job["output_version"]).tree, out)
    assert (out / "model.bin").read_bytes() == b"weights"
    assert node.records.get_log_offset("p", number) == (ws / "job.log").stat().st_size
    assert not (ws / "input" / "numbers.txt").exists()  # the data copy is dropped after the job
    assert node.finished == [("p", number)] and node.runtime.running() == {}


THREADS = "import os; print(*(os.environ.get(v) for v in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS')))"


async def test_a_jobs_maths_libraries_get_the_cores_it_asked_for_shared_among_its_gpus(node):
    """Two jobs on a box must not both start a thread per core of the box (one job each
    spinning against the other ran the digits example several times slower)."""
    asked = [({"gpus": 0, "cpus": 1.0}, [], {}, "1 1"),
             ({"gpus": 2, "cpus": 6.0}, [0, 1], {}, "3 3"),          # torchrun: a process per GPU
             ({"gpus": 4, "cpus": 2.0}, [0, 1, 2, 3], {}, "1 1"),    # at least one
             ({"gpus": 0, "cpus": 4.0}, [], {"OMP_NUM_THREADS": "7"}, "7 4"),  # a --param wins
             ({"gpus": 0}, [], {}, "None None")]                     # no cores asked: the libraries choose
    numbers = []
    for resources, gpus, params, _ in asked:
        numbers.append(node.submit(f'python -c "{THREADS}"', resources=resources, params=params))
        await node.runtime.start_job("p", numbers[-1], gpus)
    for number, (_, _, _, expected) in zip(numbers, asked):
        job = await ended(node, number)
        log = (Path(job["workspace"]) / "job.log").read_text()
        assert job["state"] == "success" and log.split(" o ", 1)[1].strip() == expected, log


async def test_running_shows_the_gpus_held_and_the_samples_are_taken(node):
    number = node.submit("python wait.py", {"wait.py": WAIT_FOR_GO})
    await node.runtime.start_job("p", number, [3])
    assert node.runtime.running() == {("p", number): [3]}
    await until(lambda: node.records.system_samples("p", number), what="a system sample")
    sample = node.records.system_samples("p", number)[0]
    assert sample["rss_bytes"] > 1_000_000 and sample["ts"] > 0
    (Path(node.job(number)["workspace"]) / "code" / "go").write_text("go")
    job = await ended(node, number)
    assert job["state"] == "success" and node.runtime.running() == {}


async def test_stop_job_stops_a_running_job_and_still_saves_its_output(node):
    number = node.submit("python -c \"import time, os; open(os.environ['FLOYD_OUTPUT'] + '/ckpt', 'w').write('1');"
                         " print('busy', flush=True); time.sleep(60)\"")
    await node.runtime.start_job("p", number, [])
    await until(lambda: (Path(node.job(number)["workspace"]) / "output" / "ckpt").exists(), what="a checkpoint")
    await node.runtime.stop_job("p", number, "stopped by user")
    job = node.job(number)  # stop_job returns once the job is recorded
    assert (job["state"], job["reason"]) == ("stopped", "stopped by user")
    assert job["output_version"] == f"p/{number}/output:1"
    assert node.runtime.running() == {}


async def test_max_runtime_becomes_timeout(node):
    number = node.submit("sleep 30", max_runtime=0.5)
    await node.runtime.start_job("p", number, [])
    job = await until(final(node, number))
    assert (job["state"], job["reason"]) == ("timeout", "exceeded --max-runtime 0.5s")


async def test_a_failing_command_is_failed_with_its_exit_code(node):
    number = node.submit("python -c 'raise SystemExit(7)'")
    await node.runtime.start_job("p", number, [])
    job = await until(final(node, number))
    assert (job["state"], job["exit_code"], job["reason"]) == ("failed", 7, "exit code 7")


async def test_a_bad_mount_point_fails_the_job_before_it_starts(node):
    mount = node.upload("d", {"a": "1"})
    number = node.submit("true", data=[{**mount, "mount": "/etc/d"}])
    await node.runtime.start_job("p", number, [0])
    job = node.job(number)
    assert job["state"] == "failed" and "/etc" in job["reason"]
    assert node.runtime.running() == {} and node.finished == [("p", number)]


async def test_reattach_records_a_job_that_finished_while_no_daemon_watched(node):
    number = node.submit("python wait.py", {"wait.py": WAIT_FOR_GO})
    await node.runtime.start_job("p", number, [0])
    ws = Path(node.job(number)["workspace"])
    await until(lambda: "waiting" in (ws / "job.log").read_text(), what="the job to wait")
    await node.runtime.close()  # the daemon goes away; the agent must not
    (ws / "code" / "go").write_text("go")
    await until(lambda: (s := read_status(ws)) is not None and s.exited, what="the agent to finish alone")
    assert node.job(number)["state"] == "running"
    node.reopen()
    await node.runtime.reattach()
    job = await until(final(node, number))
    assert job["state"] == "success"
    assert [v for _, v, _ in node.records.metric_series("p", number)["acc"]] == [0.1, 0.9]
    assert job["output_version"] == f"p/{number}/output:1"


async def test_reattach_to_a_live_agent_resumes_the_log_without_duplicates(node):
    number = node.submit("python wait.py", {"wait.py": WAIT_FOR_GO})
    await node.runtime.start_job("p", number, [0])
    ws = Path(node.job(number)["workspace"])
    await until(lambda: node.records.metric_series("p", number).get("acc"), what="the first metric")
    await node.runtime.close()
    node.reopen()
    await node.runtime.reattach()
    assert node.runtime.running() == {("p", number): [0]}
    (ws / "code" / "go").write_text("go")
    job = await until(final(node, number))
    assert job["state"] == "success"
    assert [v for _, v, _ in node.records.metric_series("p", number)["acc"]] == [0.1, 0.9]


async def test_an_agent_that_vanished_while_the_daemon_was_away_is_lost(node):
    number = node.submit("sleep 60")
    await node.runtime.start_job("p", number, [0])
    ws = Path(node.job(number)["workspace"])
    status = await until(lambda: (s := read_status(ws)) is not None and s.state == "running" and s)
    await node.runtime.close()
    os.kill(status.agent_pid, signal.SIGKILL)
    await until(lambda: not alive(read_status(ws)), what="the agent to be gone")
    node.reopen()
    await node.runtime.reattach()
    job = await ended(node, number)
    assert job["state"] == "lost" and f"pid {status.agent_pid}" in job["reason"]
    assert node.runtime.running() == {}


async def test_an_agent_killed_while_watched_is_lost_promptly(node):
    number = node.submit("sleep 60")
    await node.runtime.start_job("p", number, [])
    ws = Path(node.job(number)["workspace"])
    status = await until(lambda: (s := read_status(ws)) is not None and s.state == "running" and s)
    os.kill(status.agent_pid, signal.SIGKILL)
    job = await until(final(node, number), timeout=5)
    assert job["state"] == "lost"


async def test_without_a_sandbox_a_lost_jobs_leftover_processes_are_killed(state_dir):
    (state_dir / "state").mkdir()
    node = Node(state_dir / "state", sandbox="none")
    try:
        number = node.submit("sleep 60 & echo $! > bg.pid; wait")
        await node.runtime.start_job("p", number, [])
        ws = Path(node.job(number)["workspace"])
        await until(lambda: (ws / "code" / "bg.pid").exists() and (ws / "code" / "bg.pid").read_text().strip())
        background = int((ws / "code" / "bg.pid").read_text())
        os.kill(read_status(ws).agent_pid, signal.SIGKILL)
        job = await until(final(node, number), timeout=5)
        assert job["state"] == "lost"
        await until(lambda: not os.path.exists(f"/proc/{background}") or
                    open(f"/proc/{background}/stat").read().split(") ")[1][0] == "Z", what="the orphan to die")
    finally:
        await node.runtime.close()
        node.close()


async def test_reattach_resumes_a_job_whose_start_was_cut_short(node):
    number = node.submit("echo resumed")
    ws = node.state / "jobs" / "p" / str(number)
    node.records.set_state("p", number, "starting", "", gpus=[0], workspace=str(ws))  # the daemon died here
    await node.runtime.reattach()
    job = await until(final(node, number))
    assert job["state"] == "success" and "resumed" in (ws / "job.log").read_text()


async def test_stop_while_starting_means_the_job_never_runs(node, monkeypatch):
    import threading
    from floydd.runtime import runner
    gate, entered = threading.Event(), threading.Event()
    real_prepare = runner.workspace.prepare

    def slow_prepare(*args, **kwargs):
        entered.set()
        gate.wait(10)
        return real_prepare(*args, **kwargs)
    monkeypatch.setattr(runner.workspace, "prepare", slow_prepare)
    number = node.submit("touch ran")
    start = asyncio.create_task(node.runtime.start_job("p", number, [0]))
    await until(entered.is_set, what="the prestart to begin")
    stop = asyncio.create_task(node.runtime.stop_job("p", number, "changed my mind"))
    await until(lambda: ("p", number) in node.runtime._stop_requests, what="the stop to be noted")
    gate.set()
    await asyncio.wait_for(asyncio.gather(start, stop), 20)
    job = node.job(number)
    assert (job["state"], job["reason"]) == ("stopped", "changed my mind")
    ws = Path(job["workspace"])
    assert read_status(ws) is None and not (ws / "code" / "ran").exists()
    assert node.runtime.running() == {} and node.finished == [("p", number)]


async def test_start_job_refuses_a_job_that_is_not_queued(node):
    number = node.submit("true")
    node.records.set_state("p", number, "stopped", "by hand")
    from floydd.errors import Conflict
    with pytest.raises(Conflict):
        await node.runtime.start_job("p", number, [])
    assert node.runtime.running() == {}


@pytest.mark.slow
async def test_a_broken_requirements_file_fails_the_job_with_pips_last_line(node):
    number = node.submit("true", {"floyd_requirements.txt": "--no-index\nfloydd-no-such-package==1.0\n"})
    await node.runtime.start_job("p", number, [])
    job = node.job(number)
    assert job["state"] == "failed"
    assert job["reason"].startswith("installing floyd_requirements.txt failed: ")
    assert "floydd-no-such-package" in job["reason"]
    assert not list((node.state / "envs").glob("*/bin"))  # nothing half-built is kept


async def test_a_job_that_writes_nothing_to_output_makes_no_dataset_version(node):
    number = node.submit("python -c 'print(1)'")
    await node.runtime.start_job("p", number, [])
    job = await ended(node, number)
    assert (job["state"], job["output_version"]) == ("success", "")      # "": it saved nothing
    assert node.store.catalog.list(f"p/{number}/output") == []
    assert "/output is empty: nothing saved" in [e["message"] for e in node.records.events("p", number)]
