"""The sandbox ``pip install -r floyd_requirements.txt`` runs in: a job's, for a build.

A requirement such as ``./pkg`` runs that package's setup.py (or build backend): project
code, so it sees what a job sees (:mod:`floydd.agent.allowlist`) and less::

    the system allow-list          /usr, /lib*, a minimal /etc, /sys; no GPU device nodes
    the Python                     the base interpreter's prefix and the daemon's, read-only
    ENV (STATE/envs/<sha256>)      read-write, at its own path (scripts name it in #!)
    /code                          the job's code, read-write, the working directory
    /pip-cache                     pip's cache (STATE/envs/.pip-cache), read-write
    WHEELHOUSE                     the site's ``wheelhouse``, read-only, at its own path
    /home/floyd, /tmp              empty, private (the rest of the sandbox's root is read-only)
    the network                    only with ``build_network = true`` (else --unshare-net)

Not the state folder (store key, API token, node key, records), not other jobs, not the
daemon's environment. The pip cache is shared by the builds of this box: a build can leave
files there that a later build reads (as on any machine where pip keeps a cache).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from floydd.agent import allowlist, jobenv
from floydd.agent.sandbox import SANDBOX_HOME, base_args
from floydd.errors import InvalidSpec

__all__ = ["BuildPolicy", "pip_command", "build_env", "PIP_SITE"]

CACHE = "/pip-cache"
PIP_SITE = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST")
"""The daemon's pip settings a build with the network gets (the site's index or mirror)."""
_PROXY = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildPolicy:
    """What the site allows environment builds (config ``build_network``, ``wheelhouse``)."""

    network: bool = True
    wheelhouse: str = ""


def pip_command(bwrap: str | None, *, env_dir: Path, code_dir: Path, requirements: str, cache: Path,
                policy: BuildPolicy, state_dir: Path, base: Mapping[str, str]
                ) -> tuple[list[str], dict[str, str], Path]:
    """``(argv, env, cwd)`` that install ``code_dir/requirements`` into the venv ``env_dir``,
    in bubblewrap (``bwrap``) or, without one, in the code folder with the same clean env."""
    sandboxed = bwrap is not None
    if policy.wheelhouse and not os.path.isdir(policy.wheelhouse):
        raise InvalidSpec(f"the wheelhouse {policy.wheelhouse} is not a folder",
                          hint="fix wheelhouse in floydd.toml (a folder of .whl files), or leave it out")
    where = Path("/code") if sandboxed else Path(code_dir)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "-r", str(where / requirements)]
    if not policy.network:
        pip.append("--no-index")
    if policy.wheelhouse:
        pip += ["--find-links", policy.wheelhouse]
    home = SANDBOX_HOME if sandboxed else str(Path(code_dir).parent / "home")
    tmp = "/tmp" if sandboxed else str(Path(code_dir).parent / "tmp")
    env = build_env(base, env_dir=env_dir, home=home, tmp=tmp, cache=CACHE if sandboxed else str(cache),
                    network=policy.network)
    if not sandboxed:
        return pip, env, Path(code_dir)
    args = [bwrap, *base_args()]
    if not policy.network:
        args.append("--unshare-net")
    args += allowlist.system_args(gpus=False)
    roots = [r for r in allowlist.python_roots(str(env_dir / "bin")) + allowlist.extra_roots()
             if not allowlist.under_any(r, [str(env_dir)])]
    args += allowlist.bind_roots(roots, str(state_dir))
    args += ["--bind", str(env_dir), str(env_dir), "--bind", str(code_dir), "/code", "--bind", str(cache), CACHE,
             "--tmpfs", SANDBOX_HOME]
    if policy.wheelhouse:
        args += ["--ro-bind", policy.wheelhouse, policy.wheelhouse]
    args += ["--remount-ro", "/", "--chdir", "/code"]
    return args + pip, env, Path("/")


def build_env(base: Mapping[str, str], *, env_dir: Path, home: str, tmp: str, cache: str,
              network: bool) -> dict[str, str]:
    """The build's environment: the job allow-list, the site's pip and proxy settings when it
    may use the network, and pip's own switches."""
    env = jobenv.passed(base, _PROXY + (PIP_SITE if network else ()))
    env.update({"PATH": f"{env_dir / 'bin'}:{jobenv.SANE_PATH}", "HOME": home, "TMPDIR": tmp,
                "PIP_CACHE_DIR": cache, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "PYTHONUNBUFFERED": "1"})
    return env
