"""spec.json and status.json: round trips, validation, pid identity, outcomes."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from floydd.agent.spec import AgentSpec, BindMount
from floydd.model import check_mount_target
from floydd.agent.status import (STATUS_ROOM, Status, atomic_write, make_room, process_start_time, read_status,
                                 write_status)
from floydd.agent.supervisor import outcome_of
from floydd.errors import InvalidSpec, UnsafePath


def test_spec_round_trips_through_json():
    spec = AgentSpec(job="digits/3", command="python train.py", env={"LR": "0.1"}, gpu_ids=(0, 2),
                     max_runtime=3600, python_bin="/opt/py/bin", mounts=(BindMount(source="input", target="/input"),),
                     sandbox="bwrap", stop_grace=5, state_dir="/var/lib/floydd")
    assert AgentSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("fields,error", [
    ({"command": "  "}, InvalidSpec),
    ({"sandbox": "docker"}, InvalidSpec),
    ({"env": {"A=B": "x"}}, InvalidSpec),
    ({"max_runtime": 0}, InvalidSpec),
    ({"mounts": (BindMount(source="../x", target="/input"),)}, UnsafePath),
    ({"mounts": (BindMount(source="code", target="/data"),)}, UnsafePath),
    ({"mounts": (BindMount(source="input", target="/etc/passwd"),)}, UnsafePath),
])
def test_spec_refuses_what_the_agent_must_not_run(fields, error):
    with pytest.raises(error):
        AgentSpec(**{"job": "p/1", "command": "true", **fields})


@pytest.mark.parametrize("text", ["", "[]", "{}", '{"job": "p/1"}', "not json"])
def test_a_malformed_spec_file_is_an_invalid_spec(text):
    with pytest.raises(InvalidSpec):
        AgentSpec.from_json(text)


@pytest.mark.parametrize("target", ["/input", "/input/x", "/data", "/datasets/mnist", "/floyd/input"])
def test_mount_targets_that_are_fine(target):
    assert check_mount_target(target) == target


@pytest.mark.parametrize("target", ["", "input", "/", "/code", "/code/x", "/output", "/output/ckpt",
                                    "/proc/x", "/dev", "/sys/fs", "/usr/lib", "/bin", "/lib64", "/lib/x",
                                    "/etc", "/tmp/x", "/home/me", "/root", "/run/x", "/var/lib",
                                    "/input/", "/input/../etc", "/a//b", "/./input", "/job.log", "/stop",
                                    "/job.log.2", "/job.log.1/x"])
def test_mount_targets_that_are_refused(target):
    with pytest.raises(UnsafePath):
        check_mount_target(target)


@given(st.text(alphabet="/.abc", max_size=12))
def test_an_accepted_target_is_absolute_normalized_and_no_system_path(target):
    try:
        check_mount_target(target)
    except UnsafePath:
        return
    assert target.startswith("/") and os.path.normpath(target) == target and target != "/"
    assert target.split("/")[1] not in ("code", "output", "etc", "tmp", "home", "root")


def test_status_round_trip_and_atomic_rewrite(tmp_path):
    assert read_status(tmp_path) is None
    first = Status(agent_pid=1, agent_start_time=2.5)
    write_status(tmp_path, first)
    assert read_status(tmp_path) == first
    final = first.evolve(state="exited", outcome="timeout", reason="exceeded --max-runtime 5s", exit_code=143)
    write_status(tmp_path, final)
    assert read_status(tmp_path) == final and read_status(tmp_path).exited
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temp file left behind


def test_a_status_file_that_stays_torn_reads_as_no_status(tmp_path):
    (tmp_path / "status.json").write_text('{"agent_pid": 1, "agent_st')
    assert read_status(tmp_path) is None


def test_a_status_caught_half_written_in_place_is_read_again(tmp_path, monkeypatch):
    """On a full disk the agent writes over status.json in place; a read that meets the write
    half done must not make a live agent look as if it never reported (the daemon would call
    its run lost)."""
    running = Status(agent_pid=1, agent_start_time=2.0, state="running", job_pid=7)
    write_status(tmp_path, running)
    whole = (tmp_path / "status.json").read_bytes()
    reads = iter([whole[:30] + b"x" * (len(whole) - 30), whole[:60] + b"\0" * 10, whole])
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: next(reads))
    assert read_status(tmp_path) == running


def test_atomic_write_replaces_content_whole(tmp_path):
    path = tmp_path / "f"
    atomic_write(path, b"a" * 100_000)
    atomic_write(path, b"b", durable=True)
    assert path.read_bytes() == b"b"


def test_on_a_full_disk_the_status_is_written_in_place_and_reads_whole(tmp_path, monkeypatch):
    long = Status(agent_pid=1, agent_start_time=2.0, state="running", reason="x" * 300)
    write_status(tmp_path, long)

    def full(fd, data):  # a full disk: a new file gets no blocks (what is allocated stays writable)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    final = Status(agent_pid=1, agent_start_time=2.0, state="exited", outcome="failed", reason="disk full")
    write_status(tmp_path, final)
    assert read_status(tmp_path) == final  # shorter than before: padded, still one JSON object
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp file left behind


def test_the_room_made_before_the_agent_starts_takes_every_status_on_a_full_disk(tmp_path, monkeypatch):
    make_room(tmp_path)
    assert read_status(tmp_path) is None   # blank: the agent has not written yet
    assert (tmp_path / "status.json").stat().st_size == STATUS_ROOM

    def full(fd, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    first = Status(agent_pid=1, agent_start_time=2.0)
    write_status(tmp_path, first)          # the agent's first status, no new file possible
    assert read_status(tmp_path) == first
    final = first.evolve(state="exited", outcome="failed", reason="disk full at " + "/x" * 5000)
    write_status(tmp_path, final)          # a reason too long for the room is cut, the rest kept
    back = read_status(tmp_path)
    assert back.exited and back.outcome == "failed" and back.reason.endswith("…")
    assert final.reason.startswith(back.reason[:-1]) and len(back.reason) > 3000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]
    assert (tmp_path / "status.json").stat().st_size == STATUS_ROOM


def test_making_room_leaves_a_status_the_agent_wrote_alone(tmp_path):
    running = Status(agent_pid=1, agent_start_time=2.0, state="running")
    write_status(tmp_path, running)
    make_room(tmp_path)
    assert read_status(tmp_path) == running
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_process_start_time_matches_psutil_and_tells_reused_pids_apart():
    me = os.getpid()
    assert process_start_time(me) == round(psutil.Process(me).create_time(), 2)
    child = subprocess.Popen(["sleep", "0.01"])
    child.wait()
    assert process_start_time(child.pid) in (None, process_start_time(child.pid))  # gone or reused
    assert process_start_time(2 ** 22 + 12345) is None


@pytest.mark.parametrize("returncode,ending,expected", [
    (0, None, ("success", "exit code 0", 0, None)),
    (3, None, ("failed", "exit code 3", 3, None)),
    (-signal.SIGKILL, None, ("failed", "killed by SIGKILL", 137, "SIGKILL")),
    (128 + signal.SIGSEGV, None, ("failed", "killed by SIGSEGV (exit code 139)", 139, "SIGSEGV")),
    (0, ("stopped", "stopped by user"), ("stopped", "stopped by user", 0, None)),
    (-signal.SIGTERM, ("timeout", "exceeded --max-runtime 5s"),
     ("timeout", "exceeded --max-runtime 5s", 143, "SIGTERM")),
])
def test_outcome_of_an_exit(returncode, ending, expected):
    assert outcome_of(returncode, ending) == expected


def test_the_log_cap_travels_in_the_spec_and_what_was_dropped_in_the_status():
    spec = AgentSpec(job="p/1", command="true", max_log_bytes=256 << 20)
    assert AgentSpec.from_json(spec.to_json()).max_log_bytes == 256 << 20
    assert AgentSpec.from_json('{"job": "p/1", "command": "true"}').max_log_bytes is None   # an older daemon's
    for bad in (0, -1, True):
        with pytest.raises(InvalidSpec, match="max_log_bytes"):
            AgentSpec(job="p/1", command="true", max_log_bytes=bad)
    status = Status(agent_pid=1, agent_start_time=1.0, log_capped=5.0, log_dropped_lines=7, log_dropped_bytes=700)
    assert Status.from_json(status.to_json()) == status
    assert Status.from_json('{"agent_pid": 1, "agent_start_time": 1.0}').log_dropped_lines == 0   # an older agent's
