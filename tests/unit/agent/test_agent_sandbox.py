"""The job's command line and environment, with and without bubblewrap (no processes run)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from floydd.agent.jobenv import FIXED, SANE_PATH, agent_env
from floydd.agent.sandbox import SANDBOX_HOME, build_launch
from floydd.agent.spec import AgentSpec, BindMount

WS = Path("/srv/floydd/jobs/p/1")
BASE = {"PATH": "/home/a/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "FLOYDD_TOKEN": "secret", "FLOYD_HOST": "x",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3", "HOME": "/root", "TMPDIR": "/var/tmp", "LC_TIME": "de_DE.UTF-8",
        "TZ": "Europe/Paris", "NCCL_SOCKET_IFNAME": "eth1", "NVIDIA_DRIVER_CAPABILITIES": "compute",
        "CUDA_CACHE_PATH": "/cache", "AWS_SECRET_ACCESS_KEY": "aws-secret", "PYTHONPATH": "/home/a/lib",
        "LD_PRELOAD": "/home/a/evil.so", "SSH_AUTH_SOCK": "/run/user/0/ssh", "HTTPS_PROXY": "http://proxy:3128"}


def spec(**fields) -> AgentSpec:
    return AgentSpec(**{"job": "p/1", "command": "python train.py", "gpu_ids": (2,), "env": {"lr": "0.1"},
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
    assert env["PATH"] == f"/opt/py/bin:{SANE_PATH}" and env["LANG"] == "C.UTF-8"
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"], env["FLOYD_JOB"], env["lr"]) == \
        ("2", "PCI_BUS_ID", "p/1", "0.1")
    assert "FLOYDD_TOKEN" not in env and "FLOYD_HOST" not in env


def test_the_spec_env_cannot_override_the_gpu_assignment():
    launch = build_launch(spec(env={"CUDA_VISIBLE_DEVICES": "0,1", "FLOYD_JOB": "other/9"}, gpu_ids=()), WS, None, BASE)
    assert (launch.env["CUDA_VISIBLE_DEVICES"], launch.env["FLOYD_JOB"]) == ("", "p/1")


def test_under_bwrap_the_job_sees_floydhub_paths_and_not_the_state_dir():
    launch = build_launch(spec(mounts=(BindMount(source="input", target="/input"), BindMount(source="data/x", target="/data/x"))),
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
    # the sandbox's own root (and the folders made for the binds) read-only once all is bound
    assert argv[argv.index("--remount-ro") + 1] == "/" and argv.index("--remount-ro") > max(
        i for i, a in enumerate(argv) if a in ("--bind", "--ro-bind", "--tmpfs", "--dev-bind"))
    assert launch.env["FLOYD_INPUT"] == "/input" and launch.env["HOME"] == SANDBOX_HOME
    # an allow-list: system folders, never the host's root, homes, /var, /srv or /opt
    tops = [dst for _, dst in ro if dst.count("/") == 1]
    assert "/usr" in tops and "/" not in [dst for _, dst in ro]
    for hidden in ("/home", "/root", "/var", "/srv", "/opt", "/mnt", "/run", "/code", "/output", "/proc"):
        assert hidden not in tops
    assert not [dst for _, dst in ro if dst.startswith(("/home/", "/var/", "/srv/"))]
    etc = [dst for _, dst in ro if dst.startswith("/etc")]
    assert "/etc" not in etc and all(dst.count("/") == 2 for dst in etc)
    assert not {"/etc/shadow", "/etc/sudoers", "/etc/ssh", "/etc/floydd"} & set(etc)


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


def test_only_the_allow_list_of_the_daemons_environment_reaches_the_job():
    env = build_launch(spec(env={"lr": "0.1", "FLOYD_BOX": "b0x", "FLOYD_ATTEMPT": "2"}), WS, "/usr/bin/bwrap", BASE).env
    for name in ("LANG", "LC_TIME", "TZ", "NCCL_SOCKET_IFNAME", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_CACHE_PATH"):
        assert env[name] == BASE[name]
    for name in ("AWS_SECRET_ACCESS_KEY", "PYTHONPATH", "LD_PRELOAD", "SSH_AUTH_SOCK", "HTTPS_PROXY", "FLOYDD_TOKEN",
                 "FLOYD_HOST"):
        assert name not in env
    assert (env["lr"], env["FLOYD_BOX"], env["FLOYD_ATTEMPT"], env["FLOYD_JOB"]) == ("0.1", "b0x", "2", "p/1")
    assert env["PATH"] == f"/opt/py/bin:{SANE_PATH}" and "/home/a" not in env["PATH"]
    assert env["HOME"] == SANDBOX_HOME and env["CUDA_VISIBLE_DEVICES"] == "2"


def test_the_site_adds_names_to_the_allow_list_through_the_agents_environment():
    base = agent_env(BASE, ["HTTPS_PROXY", "MY_*", "FLOYD_TOKEN"])
    assert "AWS_SECRET_ACCESS_KEY" not in base and base["PATH"] == BASE["PATH"]  # the agent runs floydd itself
    env = build_launch(spec(), WS, None, {**base, "MY_SETTING": "1", "FLOYDD_X": "no"}).env
    assert env["HTTPS_PROXY"] == "http://proxy:3128" and env["MY_SETTING"] == "1"
    assert "FLOYD_TOKEN" not in env and "FLOYDD_X" not in env and "PYTHONPATH" not in env


def test_params_cannot_override_what_floydd_sets():
    env = build_launch(spec(env={"PATH": "/evil", "HOME": "/root", "FLOYD_OUTPUT": "/x"}), WS, "/usr/bin/bwrap",
                       BASE).env
    for bwrap in ("/usr/bin/bwrap", None):   # every documented fixed name is set by floydd, sandbox or not
        plain = build_launch(spec(), WS, bwrap, BASE).env
        forced = build_launch(spec(env={name: "x" for name in FIXED}), WS, bwrap, BASE).env
        assert all(forced[name] == plain[name] != "x" for name in FIXED)
    assert (env["PATH"].split(":")[0], env["HOME"], env["FLOYD_OUTPUT"]) == ("/opt/py/bin", SANDBOX_HOME, "/output")
