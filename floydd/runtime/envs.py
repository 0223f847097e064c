"""Which Python a job runs with.

``--env default`` is the daemon's own interpreter (its ``bin`` folder goes first on
the job's PATH). A project with a ``floyd_requirements.txt`` gets a cached virtual
environment on top of it::

    STATE/envs/<sha256 of the file>/      python -m venv --system-site-packages
                                          + pip install -r floyd_requirements.txt
    STATE/envs/<sha256>.lock              flock: one build at a time, the others wait
    STATE/envs/<sha256>/.floydd-ready     written last: the env is complete (and for which base)
    STATE/envs/.pip-cache/                pip's cache, shared by this box's builds

``pip install`` runs the project's own code (a ``./pkg`` requirement's setup.py or build
backend), so it runs in the same kind of sandbox as the job (:mod:`.buildbox`): no state
folder, no secrets, the allow-listed environment; writable are only the venv being built,
/code and pip's cache (``STATE/envs/.pip-cache``). The network is there when the site allows
it (``build_network``; pip then reads /etc/pip.conf and ``PIP_INDEX_URL``,
``PIP_EXTRA_INDEX_URL``, ``PIP_TRUSTED_HOST`` and the proxy variables), else pip gets
``--no-index``; a ``wheelhouse`` is passed as ``--find-links`` either way. Without a working
sandbox (``sandbox = prefer``) the build runs unsandboxed with the same clean environment,
and the job's log says so. Packages the base interpreter already has are not installed
again. A failed build leaves nothing behind and fails the job with the last line pip printed.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import site
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from floydd import log
from floydd.errors import InvalidSpec
from floydd.runtime import workspace
from floydd.runtime.buildbox import BuildPolicy, pip_command
from floydd.security import beneath

__all__ = ["python_bin_for", "ensure_env", "BuildPolicy", "REQUIREMENTS", "ENVIRONMENTS"]

REQUIREMENTS = "floyd_requirements.txt"
ENVIRONMENTS = ("default",)
_READY = ".floydd-ready"


def python_bin_for(state_dir: Path, code_dir: Path, env: str | None = "default", *,
                   log_path: Path | None = None, bwrap: str | None = None,
                   policy: BuildPolicy | None = None) -> str:
    """The ``bin`` folder to put first on the job's PATH (may build a venv: minutes).
    ``bwrap``: the sandbox the build runs in (None: unsandboxed); ``policy``: network, wheelhouse."""
    if env not in (None, "", *ENVIRONMENTS):
        raise InvalidSpec(f"unknown environment {env!r}",
                          hint=f"available: {', '.join(ENVIRONMENTS)}; add packages with a {REQUIREMENTS}")
    req = Path(code_dir) / REQUIREMENTS
    if not req.is_file() or not _has_requirements(req):
        return str(Path(sys.executable).parent)
    return str(ensure_env(Path(state_dir) / "envs", req, log_path=log_path, bwrap=bwrap, policy=policy,
                          state_dir=Path(state_dir)) / "bin")


def ensure_env(envs_dir: Path, requirements: Path, *, log_path: Path | None = None, bwrap: str | None = None,
               policy: BuildPolicy | None = None, state_dir: Path | None = None) -> Path:
    """The venv for ``requirements`` under ``envs_dir``, built once (blocking)."""
    data = requirements.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    env_dir = envs_dir / digest
    if _ready(env_dir):
        return env_dir
    envs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(envs_dir / f"{digest}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _ready(env_dir):  # another job built it while we waited
            _note(log_path, f"floydd: using the environment built for {REQUIREMENTS} ({digest[:12]})")
            return env_dir
        _note(log_path, f"floydd: building an environment for {REQUIREMENTS} ({digest[:12]})")
        started = time.monotonic()
        try:
            _build(env_dir, requirements, log_path, bwrap, policy or BuildPolicy(), state_dir or envs_dir.parent)
        except BaseException:
            _remove(env_dir)
            raise
        log.runtime.info("built env %s in %.1fs", digest[:12], time.monotonic() - started)
    return env_dir


def _build(env_dir: Path, requirements: Path, log_path: Path | None, bwrap: str | None, policy: BuildPolicy,
           state_dir: Path) -> None:
    _remove(env_dir)
    venv = [sys.executable, "-m", "venv", "--system-site-packages"]
    has_pip = importlib.util.find_spec("pip") is not None
    if has_pip:
        venv.append("--without-pip")  # the base's pip is visible through system site-packages
    _run(venv + [str(env_dir)], requirements.parent, log_path, "creating the virtual environment")
    if sys.prefix != sys.base_prefix:  # the daemon itself runs in a venv: make its packages visible too
        purelib = sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)})
        lines = [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
        Path(purelib).mkdir(parents=True, exist_ok=True)
        (Path(purelib) / "_floydd_base.pth").write_text("\n".join(lines) + "\n")
    # the venv (made by the daemon's own interpreter, above) is ready: what follows runs the project's code
    cache = env_dir.parent / ".pip-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    argv, env, cwd = pip_command(bwrap, env_dir=env_dir, code_dir=requirements.parent, requirements=requirements.name,
                                 cache=cache, policy=policy, state_dir=state_dir, base=os.environ)
    _run(argv, cwd, log_path, f"installing {REQUIREMENTS}", env=env)
    _write_ready(env_dir / _READY, json.dumps({"python": sys.executable, "version": sys.version}).encode())


def _write_ready(path: Path, data: bytes) -> None:
    """Write the ready marker without following what the build may have left at its name
    (a link to a file of the daemon's would otherwise be overwritten)."""
    _remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _run(argv: list[str], cwd: Path, log_path: Path | None, what: str, env: dict[str, str] | None = None) -> None:
    """Run a build step, streaming its output into the job's log; raise with its last line."""
    if env is None:  # the daemon's own interpreter making the venv: no project code runs
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env)
    last = ""
    assert proc.stdout is not None
    with proc.stdout:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line.strip():
                last = line.strip()
            _note(log_path, line)
    if proc.wait() != 0:
        raise InvalidSpec(f"{what} failed: {last or f'exit code {proc.returncode}'}",
                          hint=f"see the job's log (floyd logs); fix {REQUIREMENTS} or the pip configuration")


def _remove(path: Path) -> None:
    """Remove what a build left at ``path`` (the project's code ran there: links, deep
    folders), through descriptors and never following a link; what cannot go is logged."""
    try:
        beneath.remove_path(path)
    except OSError as exc:
        log.runtime.warning("cannot remove %s: %s", path, exc)


def _ready(env_dir: Path) -> bool:
    try:   # a marker the build itself left may be a link (to /dev/zero) or a FIFO: only a small regular file counts
        fd = os.open(env_dir / _READY, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            info = json.loads(os.read(fd, 1 << 16))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict):
        return False
    return info.get("python") == sys.executable and info.get("version") == sys.version


def _has_requirements(req: Path) -> bool:
    for line in req.read_text(errors="replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            return True
    return False


def _note(log_path: Path | None, text: str) -> None:
    """Append one stdout line to job.log in the agent's format."""
    if log_path is not None:
        workspace.note(log_path, text)
