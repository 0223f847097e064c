"""Floods a job may throw at its box (issue 20, "Limits"), with real agents, records and store:
a log that would grow without end stops at its cap and says what it dropped; a job whose
process ended is final at once however much of its log is left to record, the rest recorded
behind it (also after a daemon restart); metric points past their cap are thinned."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from floydd.agent.status import read_status
from floydd.errors import NotFound
from floydd.runtime import NodeRuntime, watch
from floydd.runtime.limits import LIMIT_KIND
from tests.floods import LOG_FLOOD, METRIC_FLOOD
from tests.integration.runtime.test_node_runtime import Node, ended, until

FINAL = ("success", "failed", "stopped", "timeout", "lost")


class FloodNode(Node):
    """A runtime with the limits given, noting when each job was let go of and recorded."""

    def __init__(self, state: Path, **limits) -> None:
        self.limits = limits
        self.let_go: dict[int, dict] = {}       # job number -> what was true when the runtime let go
        self.recorded: list[tuple[str, int]] = []
        super().__init__(state, sandbox="none")

    def _runtime(self) -> NodeRuntime:
        return NodeRuntime(state_dir=self.state, store=self.store, records=self.records, sandbox=self.sandbox,
                           sample_interval=0.1, tail_interval=0.05, stop_grace=2.0, on_finished=self._finished,
                           on_recorded=lambda p, n: self.recorded.append((p, n)), **self.limits)

    def _finished(self, project: str, number: int) -> None:
        job = self.records.get_job(project, number)
        ws = Path(job["workspace"])
        self.let_go[number] = {"at": time.time(), "state": job["state"], "status": read_status(ws),
                               "offset": self.records.get_log_offset(project, number),
                               "size": (ws / "job.log").stat().st_size}


@pytest.fixture
async def flood_node(state_dir, request):
    state = state_dir / "state"
    state.mkdir()
    n = FloodNode(state, **getattr(request, "param", {}))
    yield n
    await n.runtime.close()
    n.close()


def _events(node: Node, number: int, kind: str = LIMIT_KIND) -> list[dict]:
    return [e for e in node.records.events("p", number) if e["kind"] == kind]


@pytest.mark.parametrize("flood_node", [{"max_log_bytes": 1 << 20}], indirect=True)
async def test_a_job_writing_64_mib_leaves_a_1_mib_log_that_says_what_it_dropped(flood_node):
    number = flood_node.submit("python flood.py", {"flood.py": LOG_FLOOD.format(mib=64)})
    await flood_node.runtime.start_job("p", number, [])
    job = await ended(flood_node, number, timeout=60)
    ws = Path(job["workspace"])
    assert job["state"] == "success", (ws / "agent.log").read_text()[-2000:]
    data = (ws / "job.log").read_bytes()
    lines = data.splitlines()
    kept = [ln for ln in lines if ln.endswith(b" o " + b"x" * 1023)]
    assert (1 << 20) - 2000 < len(b"\n".join(kept)) <= 1 << 20 and len(data) < (1 << 20) + 1000
    status = read_status(ws)
    assert status.log_capped is not None and status.log_dropped_lines == 65536 - len(kept)
    assert status.log_dropped_bytes == status.log_dropped_lines * 1024
    assert lines[-1].endswith(f"floydd: {status.log_dropped_lines:,} lines (63 MiB) dropped: the job's log "
                              "reached its 1 MiB cap (max_log_mb)".encode()), lines[-1]
    said = [e["message"] for e in _events(flood_node, number)]
    assert said == ["job.log reached its 1 MiB cap (max_log_mb): later lines are dropped and counted, the last "
                    "line of each metric kept",
                    f"{status.log_dropped_lines:,} lines (63 MiB) dropped: the job's log reached its 1 MiB cap "
                    "(max_log_mb)"], said


async def test_a_job_is_final_as_soon_as_it_ended_and_its_metric_flood_is_recorded_behind(flood_node, monkeypatch):
    monkeypatch.setattr(watch, "DRAIN_BUDGET", 0.0)      # whatever the box's speed: more is left than is drained
    lines = 150_000
    number = flood_node.submit("python metrics.py", {"metrics.py": METRIC_FLOOD.format(lines=lines)})
    await flood_node.runtime.start_job("p", number, [])
    await until(lambda: number in flood_node.let_go, timeout=60, what="the job to end")
    at_end = flood_node.let_go[number]
    assert at_end["state"] == "success" and at_end["status"].exited
    assert at_end["offset"] < at_end["size"], at_end      # final with its log not yet recorded to the end
    assert at_end["at"] - at_end["status"].ended < 5.0    # and within seconds of the agent's end
    assert flood_node.records.logs_behind() in ([("p", number)], [])
    await until(lambda: flood_node.recorded == [("p", number)], timeout=120, what="the rest of the log recorded")
    summary = flood_node.records.metric_summary("p", number)
    assert summary["loss"]["count"] == lines and summary["loss"]["last"] == lines - 1
    assert summary["acc"]["last"] == -1 and summary["acc"]["count"] == lines // 1000 + 1
    assert flood_node.records.get_log_offset("p", number) == at_end["size"]
    assert flood_node.records.logs_behind() == []


async def test_a_log_left_behind_is_recorded_by_the_next_daemon(flood_node, monkeypatch):
    monkeypatch.setattr(watch, "DRAIN_BUDGET", 0.0)
    number = flood_node.submit("python metrics.py", {"metrics.py": METRIC_FLOOD.format(lines=100_000)})
    await flood_node.runtime.start_job("p", number, [])
    await until(lambda: number in flood_node.let_go, timeout=60, what="the job to end")
    await flood_node.runtime.close()                      # the daemon goes before the rest is recorded
    behind = flood_node.records.logs_behind()
    if not behind:                                        # it was quicker than the close: mark it again
        flood_node.records.set_log_behind("p", number, True)
    flood_node.reopen()
    await flood_node.runtime.reattach()
    await until(lambda: ("p", number) in flood_node.recorded, timeout=120, what="the next daemon to catch up")
    summary = flood_node.records.metric_summary("p", number)
    assert summary["loss"]["count"] == 100_000 and summary["acc"]["last"] == -1
    assert flood_node.records.logs_behind() == [] and flood_node.job(number)["state"] == "success"


async def test_a_catch_up_never_writes_into_the_record_of_a_newer_attempt(flood_node):
    number = flood_node.submit("true", attempt=1)
    ws = flood_node.state / "jobs" / "p" / str(number)
    ws.mkdir(parents=True)
    (ws / "job.log").write_text("".join(f'1.0 o {{"metric": "old", "value": {i}}}\n' for i in range(1000)))
    flood_node.records.update_job("p", number, workspace=str(ws))
    flood_node.records.set_state("p", number, "failed", "attempt 1")
    watcher = flood_node.runtime._watcher("p", number, ws, None)
    watcher._load()                                        # where the catch-up of attempt 1 got to
    flood_node.records.delete_job("p", number)            # the reconciler's record of attempt 2 here
    flood_node.records.insert_job("p", number, {"command": "true", "created": time.time(), "attempt": 2,
                                                "workspace": str(ws)})
    with pytest.raises(NotFound, match="attempt 2, not 1"):
        watcher._tail_once()
    assert flood_node.records.metric_summary("p", number) == {} and flood_node.records.get_log_offset("p", number) == 0


@pytest.mark.parametrize("flood_node", [{"max_metric_points": 1000}], indirect=True)
async def test_metric_points_past_the_cap_are_thinned_to_the_last_of_each_metric(flood_node):
    lines = 200_000
    number = flood_node.submit("python metrics.py", {"metrics.py": METRIC_FLOOD.format(lines=lines)})
    await flood_node.runtime.start_job("p", number, [])
    await ended(flood_node, number, timeout=60)
    await until(lambda: flood_node.records.get_log_offset("p", number) ==
                (Path(flood_node.job(number)["workspace"]) / "job.log").stat().st_size, timeout=120,
                what="the whole log recorded")
    summary = flood_node.records.metric_summary("p", number)
    recorded = summary["loss"]["count"] + summary["acc"]["count"]
    chunks = (Path(flood_node.job(number)["workspace"]) / "job.log").stat().st_size // (1 << 20) + 1
    assert 1000 <= recorded <= 1000 + 2 * chunks + 2
    assert summary["loss"]["last"] == lines - 1 and summary["acc"]["last"] == -1     # the last values stay right
    assert flood_node.records.skipped_metrics("p", number) == lines + lines // 1000 + 1 - recorded
    said = [e["message"] for e in _events(flood_node, number)]
    assert said == ["the job's metric points reached the cap of 1,000 (max_metric_points): from here on, of every "
                    "1 MiB of its log only the last point of each metric is recorded; the others are counted as "
                    "skipped"]
