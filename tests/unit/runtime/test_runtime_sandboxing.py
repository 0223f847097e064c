"""This box's sandbox policy, its refusal and its warning; the build sandbox's command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from floydd.config import preset_for_tests
from floydd.errors import Conflict, InvalidSpec
from floydd.runtime.buildbox import BuildPolicy, pip_command
from floydd.runtime.sandboxing import policy_for, resolve, serves_others

WORKS = lambda: ("/usr/bin/bwrap", "")          # noqa: E731
MISSING = lambda: (None, "bwrap is not installed")  # noqa: E731


@pytest.mark.parametrize("setting,others,policy", [
    ("auto", False, "prefer"), ("auto", True, "require"), ("require", False, "require"), ("bwrap", False, "require"),
    ("prefer", True, "prefer"), ("none", True, "off")])
def test_the_policy_follows_the_setting_and_whom_the_daemon_serves(setting, others, policy):
    assert policy_for(setting, others) == policy


def test_without_bwrap_prefer_runs_loudly_and_require_refuses():
    prefer = resolve("auto", False, MISSING)
    assert (prefer.mode, prefer.refuses) == ("none", False)
    prefer.check()
    assert "WITHOUT a sandbox (bwrap is not installed)" in prefer.warning and "\n" not in prefer.warning
    require = resolve("auto", True, MISSING)
    assert require.refuses and "runs no jobs" in require.warning
    with pytest.raises(Conflict) as err:
        require.check()
    assert err.value.code == "sandbox_required" and "bwrap is not installed" in err.value.message
    assert "prefer" in err.value.hint


def test_a_working_sandbox_says_nothing_and_none_is_never_probed():
    assert resolve("require", True, WORKS).warning is None and resolve("prefer", False, WORKS).mode == "bwrap"
    off = resolve("none", False, lambda: pytest.fail("sandbox = none must not probe"))
    assert off.mode == "none" and "sandbox = \"none\"" in off.warning and not off.refuses


def test_a_daemon_serves_others_when_configured_so_or_its_socket_lets_its_group_in(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chmod(state, 0o700)
    assert not serves_others(preset_for_tests(state))
    assert serves_others(preset_for_tests(state, system=True))
    os.chmod(state, 0o750)  # the socket's folder: group members reach the socket
    assert serves_others(preset_for_tests(state))


def _venv(tmp_path: Path) -> Path:
    env = tmp_path / "state/envs/abc"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\n")
    return env


def test_a_build_without_network_gets_no_network_no_index_and_the_wheelhouse_read_only(tmp_path):
    env_dir, code, cache, wheels = _venv(tmp_path), tmp_path / "state/jobs/p/1/code", tmp_path / "cache", tmp_path / "w"
    for path in (code, cache, wheels):
        path.mkdir(parents=True)
    base = {"LANG": "C.UTF-8", "AWS_SECRET_ACCESS_KEY": "x", "PIP_INDEX_URL": "https://mirror", "HOME": "/root"}
    argv, env, cwd = pip_command("/usr/bin/bwrap", env_dir=env_dir, code_dir=code, requirements="floyd_requirements.txt",
                                 cache=cache, policy=BuildPolicy(network=False, wheelhouse=str(wheels)),
                                 state_dir=tmp_path / "state", base=base)
    assert argv[0] == "/usr/bin/bwrap" and "--unshare-net" in argv and cwd == Path("/")
    pip = argv[argv.index(str(env_dir / "bin/python")):]
    assert pip[-4:] == ["/code/floyd_requirements.txt", "--no-index", "--find-links", str(wheels)]
    binds = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--bind"]
    assert binds == [(str(env_dir), str(env_dir)), (str(code), "/code"), (str(cache), "/pip-cache")]
    assert (str(wheels), str(wheels)) in [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--ro-bind"]
    assert "--dev-bind" not in argv and str(tmp_path / "state") not in [argv[i + 2] for i, a in enumerate(argv)
                                                                        if a in ("--bind", "--ro-bind")]
    assert "AWS_SECRET_ACCESS_KEY" not in env and "PIP_INDEX_URL" not in env  # no network: no index
    assert (env["HOME"], env["PIP_CACHE_DIR"], env["LANG"]) == ("/home/floyd", "/pip-cache", "C.UTF-8")


def test_a_build_with_network_keeps_it_and_the_sites_index_and_refuses_a_missing_wheelhouse(tmp_path):
    env_dir, code, cache = _venv(tmp_path), tmp_path / "code", tmp_path / "cache"
    code.mkdir()
    argv, env, _ = pip_command("/usr/bin/bwrap", env_dir=env_dir, code_dir=code, requirements="r.txt", cache=cache,
                               policy=BuildPolicy(), state_dir=tmp_path / "state",
                               base={"PIP_INDEX_URL": "https://mirror", "HTTPS_PROXY": "http://p:3128"})
    assert "--unshare-net" not in argv and "--no-index" not in argv
    assert env["PIP_INDEX_URL"] == "https://mirror" and env["HTTPS_PROXY"] == "http://p:3128"
    argv, env, cwd = pip_command(None, env_dir=env_dir, code_dir=code, requirements="r.txt", cache=cache,
                                 policy=BuildPolicy(), state_dir=tmp_path / "state", base={"SECRET": "s"})
    assert argv[0] == str(env_dir / "bin/python") and cwd == code and "SECRET" not in env
    with pytest.raises(InvalidSpec, match="wheelhouse"):
        pip_command(None, env_dir=env_dir, code_dir=code, requirements="r.txt", cache=cache,
                    policy=BuildPolicy(wheelhouse=str(tmp_path / "nope")), state_dir=tmp_path, base={})
