"""The sandbox's allow-list (no processes run): what of a host, real or made up, is bound."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from floydd.agent.allowlist import bind_roots, python_roots, system_args


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def fake_host(root: Path) -> Path:
    for name in ("usr/bin", "usr/lib", "lib64", "home/alice/.ssh", "var/lib/lab/bob", "srv/x", "opt/tool",
                 "etc/ssl/certs", "etc/ssh", "etc/floydd", "etc/ld.so.conf.d", "run/resolve", "sys", "dev"):
        (root / name).mkdir(parents=True, exist_ok=True)
    os.symlink("usr/bin", root / "bin")
    for name in ("passwd", "group", "shadow", "sudoers", "hosts", "ld.so.cache", "ssh/ssh_host_ed25519_key",
                 "floydd/floydd.toml", "environment"):
        (root / "etc" / name).write_text("x\n")
    (root / "run/resolve/stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    os.symlink("../run/resolve/stub-resolv.conf", root / "etc/resolv.conf")
    for dev in ("nvidia0", "nvidiactl", "null", "sda"):
        (root / "dev" / dev).write_text("")
    return root


def test_system_folders_read_only_a_minimal_etc_gpus_and_nothing_else(tmp_path):
    root = fake_host(tmp_path)
    argv = system_args(gpus=True, root=str(root))
    ro = dict((dst, src) for src, dst in pairs(argv, "--ro-bind"))
    assert ro["/usr"] == str(root / "usr") and ro["/lib64"] == str(root / "lib64") and ro["/sys"] == str(root / "sys")
    assert ("usr/bin", "/bin") in pairs(argv, "--symlink")  # a merged-/usr link stays a link
    assert {"/etc/passwd", "/etc/group", "/etc/hosts", "/etc/ssl", "/etc/ld.so.cache", "/etc/ld.so.conf.d"} <= set(ro)
    # a link out of /etc is bound as what it names (/run itself stays out)
    assert ro["/etc/resolv.conf"] == str(root / "run/resolve/stub-resolv.conf")
    for secret in ("/etc/shadow", "/etc/sudoers", "/etc/ssh", "/etc/floydd", "/etc/environment"):
        assert secret not in ro
    shown = set(ro) | {dst for _, dst in pairs(argv, "--symlink")}
    for hidden in ("/home", "/var", "/srv", "/opt", "/run", "/root", "/"):
        assert hidden not in shown
    assert pairs(argv, "--dev-bind") == [(str(root / "dev/nvidia0"), "/dev/nvidia0"),
                                         (str(root / "dev/nvidiactl"), "/dev/nvidiactl")]
    assert "/dev/sda" not in argv and argv[argv.index("--tmpfs") + 1] == "/tmp"
    assert "--dev-bind" not in system_args(gpus=False, root=str(root))  # environment builds get no GPUs


def test_a_venv_over_a_pyenv_in_a_home_under_var_binds_exactly_the_interpreters_prefix(tmp_path):
    home = tmp_path / "var/lib/lab/alice"
    prefix = home / ".pyenv/versions/3.11.7"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin/python3.11").write_text("")
    os.symlink("python3.11", prefix / "bin/python3")
    venv = tmp_path / "state/envs/abc"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {prefix / 'bin'}\ninclude-system-site-packages = true\n")
    roots = python_roots(str(venv / "bin"))
    assert str(venv) in roots and str(prefix) in roots
    assert str(home) not in roots and str(home / ".pyenv") not in roots
    assert {sys.prefix, sys.base_prefix} <= set(roots)  # the daemon's own Python (floydd's packages)


def test_a_state_folder_inside_a_bound_prefix_is_hidden_again_and_its_venv_bound_after(tmp_path):
    prefix, state = tmp_path / "opt/floydd", tmp_path / "opt/floydd/state"
    venv = state / "envs/abc"
    venv.mkdir(parents=True)
    argv = bind_roots([str(venv), str(prefix)], str(state))
    assert pairs(argv, "--ro-bind") == [(str(prefix), str(prefix)), (str(venv), str(venv))]
    assert argv.index("--tmpfs") < argv.index(str(venv)) and argv[argv.index("--tmpfs") + 1] == str(state)
    assert "--tmpfs" not in bind_roots([str(prefix)], str(tmp_path / "elsewhere"))
    assert bind_roots(["/"], None) == []  # never the host's root
