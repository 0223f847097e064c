"""The job's command line and environment, with and without bubblewrap (no processes run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from floydd.agent.sandbox import SANDBOX_HOME, build_launch
from floydd.agent.spec import AgentSpec, Mount

WS = Path("/srv/floydd/jobs/p/1")
BASE = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "FLOYDD_TOKEN": "secret", "FLOYD_HOST": "x",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3", "HOME": "/root", "TMPDIR": "/var/tmp"}


def spec(**fields) -> AgentSpec:
    return AgentSpec(**{"job": "p/1", "command": "python train.py", "gpus": ("2",), "env": {"lr": "0.1"},
                        "python_bin": "/opt/py/bin", "state_dir": "/srv/floydd", **fields})


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_without_a_sandbox_the_job_runs_in_its_workspace_with_a_clean_env():
    launch = build_launch(spec(), WS, None, BASE)
    assert launch.sandbox == "none" and launch.argv == ["/bin/sh", "-c", "python train.py"]
    assert launch.cwd == str(WS / "code")
    env = launch.env
    assert (env["FLOYD_CODE"], env["FLOYD_INPUT"], env["FLOYD_OUTPUT"]) == \
        (str(WS / "code"), str(WS / "input"), str(WS / "output"))
    assert (env["HOME"], env["TMPDIR"]) == (str(WS / "home"), str(WS / "tmp"))
    assert env["PATH"] == "/opt/py/bin:/usr/bin:/bin" and env["LANG"] == "C.UTF-8"
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"], env["FLOYD_JOB"], env["lr"]) == \
        ("2", "PCI_BUS_ID", "p/1", "0.1")
    assert "FLOYDD_TOKEN" not in env and "FLOYD_HOST" not in env


def test_the_spec_env_cannot_override_the_gpu_assignment():
    launch = build_launch(spec(env={"CUDA_VISIBLE_DEVICES": "0,1", "FLOYD_JOB": "other/9"}, gpus=()), WS, None, BASE)
    assert (launch.env["CUDA_VISIBLE_DEVICES"], launch.env["FLOYD_JOB"]) == ("", "p/1")


def test_under_bwrap_the_job_sees_floydhub_paths_and_not_the_state_dir():
    launch = build_launch(spec(mounts=(Mount(source="input", target="/input"), Mount(source="data/x", target="/data/x"))),
                          WS, "/usr/bin/bwrap", BASE)
    argv = launch.argv
    assert argv[0] == "/usr/bin/bwrap" and argv[-3:] == ["/bin/sh", "-c", "python train.py"]
    for flag in ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"):
        assert flag in argv
    assert "--unshare-net" not in argv and "--unshare-all" not in argv  # distributed training needs the network
    assert pairs(argv, "--bind") == [(str(WS / "code"), "/code"), (str(WS / "output"), "/output"),
                                     (str(WS / "home"), SANDBOX_HOME)]
    ro = pairs(argv, "--ro-bind")
    assert (str(WS / "input"), "/input") in ro and (str(WS / "data/x"), "/data/x") in ro
    assert ro.index((str(WS / "input"), "/input")) < ro.index((str(WS / "data/x"), "/data/x"))
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert "/tmp" in tmpfs
    if os.path.isdir("/srv/floydd"):
        assert "/srv/floydd" in tmpfs
    assert argv[argv.index("--chdir") + 1] == "/code"
    assert launch.env["FLOYD_INPUT"] == "/input" and launch.env["HOME"] == SANDBOX_HOME
    # the host's root is bound read-only entry by entry, never over /code or the mounts
    tops = [dst for _, dst in ro if dst.count("/") == 1]
    assert "/usr" in tops and "/code" not in tops and "/output" not in tops and "/proc" not in tops


def test_under_bwrap_python_and_floydd_stay_visible_when_they_live_under_a_hidden_folder(tmp_path):
    state = tmp_path / "state"
    venv = state / "envs" / "abc"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    launch = build_launch(spec(python_bin=str(venv / "bin"), state_dir=str(state)), state / "jobs" / "p" / "1",
                          "/usr/bin/bwrap", BASE)
    argv = launch.argv
    ro_targets = [dst for _, dst in pairs(argv, "--ro-bind")]
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert str(venv) in ro_targets  # the cached venv is under the hidden state dir (here, under /tmp)
    # every re-exposed folder comes after the tmpfs that hides its parent
    last_tmpfs = max(i for i, a in enumerate(argv) if a == "--tmpfs")
    assert argv.index(str(venv)) > last_tmpfs
    assert "/tmp" in tmpfs
