"""System mode's pure parts: its paths, the CLI's order for finding a daemon, the config of a
service install, the group-shared socket folder rules and the job user's command line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from floydd.agent import jobuser
from floydd.agent.sandbox import build_launch
from floydd.agent.spec import AgentSpec, BindMount
from floydd.config import load
from floydd.errors import InvalidSpec, UserError
from floydd.security.owned_dirs import folder_problem
from floydd.system import SERVICE_DOWN, SystemPaths, discover, job_account, service_installed, system_paths

ROOT = SystemPaths(root=Path("/sys-root"))
USER_SOCK = Path("/home/a/.local/share/floydd/floydd.sock")


def test_paths_default_to_the_real_system_folders_and_move_with_the_root():
    real = system_paths({})
    assert (real.state_dir, real.config_file, real.socket_path, real.group) == \
        (Path("/var/lib/floydd"), Path("/etc/floydd/floydd.toml"), Path("/run/floydd/floydd.sock"), "floyd")
    moved = system_paths({"FLOYDD_SYSTEM_ROOT": "/tmp/x", "FLOYDD_SYSTEM_GROUP": "lab"})
    assert (moved.state_dir, moved.socket_path, moved.group) == \
        (Path("/tmp/x/var/lib/floydd"), Path("/tmp/x/run/floydd/floydd.sock"), "lab")


def _discover(env=None, *, answering=(), existing=()):
    return discover(env or {}, USER_SOCK, ROOT, answers=lambda p: p in answering,
                    exists=lambda p: p in existing or p in answering)


def test_discovery_order_remote_then_own_socket_then_system_socket():
    both = (USER_SOCK, ROOT.socket_path)
    assert _discover({"FLOYD_HOST": "box:7654"}, answering=both).kind == "remote"
    assert _discover(answering=both).kind == "user"
    found = _discover(answering=(ROOT.socket_path,))
    assert (found.kind, found.where) == ("system", str(ROOT.socket_path))
    assert _discover().kind == "start"          # nothing installed, nothing answers: a user daemon


def test_a_stopped_service_is_down_not_replaced_unless_asked():
    for installed in (ROOT.config_dir, ROOT.state_dir):
        assert service_installed(ROOT, exists=lambda p, i=installed: p == i)
        assert _discover(existing=(installed,)).kind == "down"
        assert _discover({"FLOYD_USER_DAEMON": "1"}, existing=(installed,)).kind == "start"
        # an explicit state dir names the user's own daemon
        assert _discover({"FLOYDD_STATE_DIR": "/x"}, existing=(installed,)).kind == "start"
    assert "sudo systemctl start floydd" in SERVICE_DOWN


def test_an_explicit_state_dir_never_uses_the_system_socket():
    assert _discover({"FLOYDD_STATE_DIR": "/x"}, answering=(ROOT.socket_path,)).kind == "start"


def test_system_config_comes_from_etc_and_puts_state_and_socket_in_system_places(tmp_path):
    env = {"FLOYDD_SYSTEM_ROOT": str(tmp_path)}
    (tmp_path / "etc/floydd").mkdir(parents=True)
    (tmp_path / "etc/floydd/floydd.toml").write_text('node_name = "lab1"\njob_user = "runner"\n')
    config = load({"system": True}, env=env)
    assert (config.system, config.node_name, config.job_user) == (True, "lab1", "runner")
    assert config.state_dir == tmp_path / "var/lib/floydd"
    assert config.socket_path == tmp_path / "run/floydd/floydd.sock" and config.socket_group == "floyd"
    # the user daemon keeps its own paths and never reads /etc/floydd
    user = load({"state_dir": str(tmp_path / "mine")}, env=env)
    assert (user.system, user.node_name == "lab1", user.socket_path) == \
        (False, False, tmp_path / "mine" / "floydd.sock")
    # system = true in a config file means the same
    (tmp_path / "s.toml").write_text("system = true\n")
    assert load({}, env=env, file=tmp_path / "s.toml").socket_path == tmp_path / "run/floydd/floydd.sock"


def _st(mode: int, uid: int = 0, gid: int = 50) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@pytest.mark.parametrize("st, expected", [
    (_st(stat.S_IFDIR | 0o750), None),
    (_st(stat.S_IFDIR | 0o710), None),
    (_st(stat.S_IFDIR | 0o770), "has mode 0770"),
    (_st(stat.S_IFDIR | 0o755), "has mode 0755"),
    (_st(stat.S_IFDIR | 0o750, uid=7), "owned by uid 7"),
    (_st(stat.S_IFDIR | 0o750, gid=51), "belongs to group 51"),
    (_st(stat.S_IFLNK | 0o777), "symbolic link"),
    (_st(stat.S_IFREG | 0o640), "not a folder"),
])
def test_group_socket_folder_rules(st, expected):
    problem = folder_problem(st, 0, 50)
    assert problem is None if expected is None else expected in problem


def test_a_job_user_switch_happens_inside_bwrap_with_only_setuid_caps():
    spec = AgentSpec(job="p/1", command="id -u", state_dir="/srv/floydd", uid=1500, gid=1500,
                     mounts=(BindMount(source="data/a", target="/data"),))
    launch = build_launch(spec, Path("/srv/floydd/jobs/p/1"), "/usr/bin/bwrap", {})
    argv = launch.argv
    cut = argv.index("--")
    assert argv[cut - 4:cut] == ["--reuid=1500", "--regid=1500", "--clear-groups", "--no-new-privs"]
    assert argv[-3:] == ["/bin/sh", "-c", "id -u"]
    assert "CAP_SETUID" in argv and ["--perms", "1777", "--tmpfs", "/tmp"] == \
        argv[argv.index("--perms"):argv.index("--perms") + 4]
    assert argv[argv.index("--chdir") + 1] == "/"      # the job user enters /code itself
    assert jobuser.owned_folders(spec) == ["code", "output", "home", "tmp", "data"]
    assert AgentSpec.from_json(spec.to_json()) == spec


def test_no_job_runs_as_root_or_unsandboxed_as_the_job_user():
    with pytest.raises(InvalidSpec):
        AgentSpec(job="p/1", command="x", uid=0, gid=0)
    with pytest.raises(InvalidSpec):
        AgentSpec(job="p/1", command="x", uid=1500)
    with pytest.raises(InvalidSpec, match="no sandbox"):
        build_launch(AgentSpec(job="p/1", command="x", uid=1500, gid=1500), Path("/w"), None, {})


def test_the_job_user_must_exist_and_be_neither_root_nor_the_daemon():
    with pytest.raises(UserError, match="does not exist"):
        job_account("no-such-floyd-job-user")
    with pytest.raises(UserError, match="root or the daemon"):
        job_account("root")
