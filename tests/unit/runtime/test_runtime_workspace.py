"""Workspaces: layout, mount planning, idempotent restores; spawn's agent identity check."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from floydd.agent.spec import BindMount
from floydd.agent.status import Status, process_start_time
from floydd.agent.stop import read_stop
from floydd.errors import InvalidSpec, UnsafePath
from floydd.model import Run
from floydd.runtime import spawn, workspace
from floydd.runtime.workspace import attempt_log, job_dir, release_inputs
from floydd.store import Store
from tests.conftest import wait_until


def _run(row: dict) -> Run:
    """The run of job p/1 whose record holds ``row``."""
    return Run.from_row({"project": "p", "number": 1, "state": "starting", "created": 0.0, **row})


def prepare(ws, row: dict, store, **kw):
    return workspace.prepare(ws, _run(row), store, **kw)


def plan_mounts(data: list[dict]):
    return workspace.plan_mounts(_run({"data": data}).data)


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def tree(store, tmp_path: Path, files: dict[str, str]) -> str:
    src = tmp_path / f"src{len(list(tmp_path.iterdir()))}"
    src.mkdir()
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return str(store.snapshot(src))


class CountingStore:
    """The real store, counting restores and failing the N-th one (a daemon killed mid-restore)."""

    def __init__(self, store, fail_at: int | None = None) -> None:
        self.store, self.fail_at, self.restores = store, fail_at, 0

    def restore(self, tree_id, dest: Path, **kw) -> None:
        self.restores += 1
        if self.restores == self.fail_at:
            dest.mkdir(exist_ok=True)
            (dest / "half-written").write_text("x")
            raise KeyboardInterrupt("killed")
        self.store.restore(tree_id, dest, **kw)


def test_job_dir_is_under_state_jobs_and_refuses_odd_names(tmp_path):
    assert job_dir(tmp_path, "digits", 3) == tmp_path.absolute() / "jobs" / "digits" / "3"
    for project, number in (("../x", 1), ("a/b", 1), (".hidden", 1), ("p", 0), ("p", True)):
        with pytest.raises(UnsafePath):
            job_dir(tmp_path, project, number)


def test_plan_mounts_mirrors_targets_shallowest_first():
    mounts = plan_mounts([{"mount": "/input/x", "tree": "b"}, {"mount": "/input", "tree": "a"},
                          {"mount": "/data", "tree": "c"}])
    assert mounts == (BindMount(source="data", target="/data"), BindMount(source="input", target="/input"),
                      BindMount(source="input/x", target="/input/x"))
    with pytest.raises(InvalidSpec):
        plan_mounts([{"mount": "/d", "tree": "a"}, {"mount": "/d", "tree": "b"}])
    with pytest.raises(UnsafePath):
        plan_mounts([{"mount": "/usr/share/d", "tree": "a"}])


def test_prepare_lays_out_a_private_workspace_with_code_data_and_empty_output(store, tmp_path):
    code = tree(store, tmp_path, {"train.py": "print(1)", "pkg/m.py": ""})
    data = tree(store, tmp_path, {"a.csv": "1,2"})
    extra = tree(store, tmp_path, {"b.txt": "b"})
    ws = job_dir(tmp_path / "state", "p", 1)
    job = {"code_tree": code, "data": [{"mount": "/input", "tree": data}, {"mount": "/input/extra", "tree": extra}]}
    mounts = prepare(ws, job, store)
    assert [m.target for m in mounts] == ["/input", "/input/extra"]
    assert (ws / "code" / "train.py").read_text() == "print(1)" and (ws / "code" / "pkg" / "m.py").exists()
    assert (ws / "input" / "a.csv").read_text() == "1,2" and (ws / "input" / "extra" / "b.txt").read_text() == "b"
    assert list((ws / "output").iterdir()) == [] and (ws / "job.log").exists()
    for path in (ws, ws / "code", ws / "output", ws / "home", ws / "tmp", ws.parent, ws.parent.parent):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_prepare_again_redoes_nothing_finished_but_empties_output(store, tmp_path):
    job = {"code_tree": tree(store, tmp_path, {"t.py": ""}),
           "data": [{"mount": "/data", "tree": tree(store, tmp_path, {"d": "1"})}]}
    ws = job_dir(tmp_path / "state", "p", 1)
    counting = CountingStore(store)
    prepare(ws, job, counting)
    assert counting.restores == 2
    (ws / "output" / "stale").write_text("from an earlier attempt")
    prepare(ws, job, counting)
    assert counting.restores == 2 and list((ws / "output").iterdir()) == []


def test_a_rerun_here_writes_a_new_log_and_keeps_the_earlier_attempts(store, tmp_path):
    job = {"code_tree": tree(store, tmp_path, {"t.py": ""}), "attempt": 1}
    ws = job_dir(tmp_path / "state", "p", 1)
    prepare(ws, job, store)
    (ws / "job.log").write_bytes(b"1.0 o first attempt\n")
    prepare(ws, job, store)                         # the same attempt again (a daemon restart): the same log
    assert (ws / "job.log").read_bytes() == b"1.0 o first attempt\n"
    prepare(ws, {**job, "attempt": 2}, store)
    assert (ws / "job.log").read_bytes() == b""
    assert attempt_log(ws, 1).read_bytes() == b"1.0 o first attempt\n" and attempt_log(ws, 1).name == "job.log.1"
    (ws / "job.log").write_bytes(b"2.0 o second\n")
    prepare(ws, {**job, "attempt": 3}, store)
    assert attempt_log(ws, 2).read_bytes() == b"2.0 o second\n"
    assert attempt_log(ws, 1).read_bytes() == b"1.0 o first attempt\n"
    prepare(ws, {**job, "attempt": 4}, store)       # attempt 3 wrote nothing: no empty file kept for it
    assert not attempt_log(ws, 3).exists()


def test_a_restore_cut_short_is_redone_from_scratch(store, tmp_path):
    job = {"code_tree": tree(store, tmp_path, {"t.py": "code"}),
           "data": [{"mount": "/input", "tree": tree(store, tmp_path, {"d": "data"})}]}
    ws = job_dir(tmp_path / "state", "p", 1)
    with pytest.raises(KeyboardInterrupt):
        prepare(ws, job, CountingStore(store, fail_at=2))  # dies while restoring /input
    assert (ws / "input" / "half-written").exists()
    again = CountingStore(store)
    prepare(ws, job, again)
    assert again.restores == 1  # only /input: the code was complete
    assert sorted(p.name for p in (ws / "input").iterdir()) == ["d"]


def test_a_nested_mount_colliding_with_a_folder_of_its_parent_is_refused(store, tmp_path):
    job = {"code_tree": None, "data": [{"mount": "/input", "tree": tree(store, tmp_path, {"x/a": "1"})},
                                       {"mount": "/input/x", "tree": tree(store, tmp_path, {"b": "2"})}]}
    with pytest.raises(InvalidSpec, match="collides"):
        prepare(job_dir(tmp_path / "state", "p", 1), job, store)


def test_release_inputs_drops_the_data_copies_and_keeps_code_and_output(store, tmp_path):
    job = {"code_tree": tree(store, tmp_path, {"t.py": ""}),
           "data": [{"mount": "/data", "tree": tree(store, tmp_path, {"d": "1"})}]}
    ws = job_dir(tmp_path / "state", "p", 1)
    prepare(ws, job, store)
    (ws / "output" / "model").write_text("m")
    (ws / "data" / "d").chmod(0o400)
    (ws / "data").chmod(0o500)
    release_inputs(ws)
    assert not (ws / "data").exists() and (ws / "code" / "t.py").exists() and (ws / "output" / "model").exists()


def test_alive_knows_a_running_agent_from_a_dead_one_a_zombie_and_a_reused_pid():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        status = Status(agent_pid=proc.pid, agent_start_time=process_start_time(proc.pid))
        assert spawn.alive(status)
        assert not spawn.alive(status.evolve(agent_start_time=status.agent_start_time - 100))  # pid reused
        proc.kill()
        wait_until(lambda: not spawn.alive(status), what="the killed child to count as gone")
        assert process_start_time(proc.pid) == status.agent_start_time  # still a zombie, unreaped
    finally:
        proc.kill()
        proc.wait()
    assert not spawn.alive(status) and not spawn.alive(None)


def test_request_stop_writes_the_reason_even_when_no_agent_runs(tmp_path):
    assert spawn.request_stop(tmp_path, "stopped by user") is False
    assert read_stop(tmp_path) == ("stopped", "stopped by user")
    assert spawn.request_stop(tmp_path, "disk full at /x", "failed") is False
    assert read_stop(tmp_path) == ("failed", "disk full at /x")
    (tmp_path / "stop").write_text("deleted\n")  # written by an older daemon: plain text
    assert read_stop(tmp_path) == ("stopped", "deleted")
    assert read_stop(tmp_path / "nowhere") is None
