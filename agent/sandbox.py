"""How a job is started: the bubblewrap command line (or none) and the job's environment.

Under bubblewrap the job sees an allow-list of the host (:mod:`.allowlist`: system folders
read-only, a minimal /etc, its Python, GPUs) and FloydHub's paths::

    /code        WORKSPACE/code, writable, the working directory
    /input ...   each data mount, read-only
    /output      WORKSPACE/output, writable
    /home/floyd  WORKSPACE/home, $HOME
    /tmp         a private tmpfs

Nothing else of the host exists inside: not the homes (wherever they live), not the state
folder (store, secrets, records, other jobs' workspaces, the socket).

In system mode the job runs as the job user (:mod:`.jobuser`), never as root or the daemon.

Without bubblewrap the same folders stay in the workspace and ``FLOYD_CODE``,
``FLOYD_INPUT``, ``FLOYD_OUTPUT`` point there; the job then sees what the daemon's user
sees (the daemon says so loudly: :mod:`floydd.runtime.sandboxing`). Either way the job's
environment is built from an allow-list (:mod:`.jobenv`), never the daemon's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from floydd.agent import allowlist, jobenv, jobuser
from floydd.agent.spec import AgentSpec, BindMount
from floydd.errors import InvalidSpec

__all__ = ["Launch", "resolve_sandbox", "probe_bwrap", "build_launch", "base_args", "SANDBOX_HOME"]

SANDBOX_HOME = "/home/floyd"


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything ``Popen`` needs to start the job."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    sandbox: str  # "bwrap" | "none"


def probe_bwrap() -> tuple[str | None, str]:
    """``(path, "")`` when bubblewrap is installed and works here, else ``(None, why)``."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bwrap is not installed"
    try:  # the same kind of view a job gets, so a bwrap that cannot make it is found here
        proc = subprocess.run([path, *base_args(), *allowlist.system_args(gpus=False), "true"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bwrap does not run: {exc}"
    if proc.returncode != 0:
        return None, f"bwrap does not work here: {proc.stderr.decode(errors='replace').strip()}"
    return path, ""


def resolve_sandbox(mode: str) -> str | None:
    """The bwrap binary to use for ``mode`` (None: run without a sandbox).

    ``auto`` probes bubblewrap (a few ms); ``bwrap`` only looks it up, since the daemon
    resolves ``auto`` once per node and passes the result: a bwrap that fails anyway
    says why in the job's log.
    """
    if mode == "none":
        return None
    if mode == "bwrap":
        path = shutil.which("bwrap")
        if path is None:
            raise InvalidSpec("the job asks for the bubblewrap sandbox but bwrap is not installed",
                              hint="install bubblewrap (apt install bubblewrap) or set sandbox = auto")
        return path
    return probe_bwrap()[0]


def build_launch(spec: AgentSpec, ws: Path, bwrap: str | None, base_env: dict[str, str] | None = None) -> Launch:
    """The command, environment and cwd that run ``spec.command`` for workspace ``ws``."""
    ws = Path(ws).absolute()
    base = dict(os.environ if base_env is None else base_env)
    env = jobenv.passed(base, jobenv.extra_from(base))
    env.update(spec.env)
    path = f"{spec.python_bin}:{jobenv.SANE_PATH}" if spec.python_bin else jobenv.SANE_PATH
    usersite = allowlist.user_site()
    if usersite:
        env["PYTHONUSERBASE"] = usersite[0]
    env.update({
        "PATH": path, "PYTHONUNBUFFERED": "1", "FLOYD_JOB": spec.job,
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, spec.gpu_ids)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    })
    shell = ["/bin/sh", "-c", spec.command]
    if spec.uid is not None and bwrap is None:
        raise InvalidSpec("this box runs jobs as the job user inside the sandbox, and it has no sandbox",
                          hint="install bubblewrap (apt install bubblewrap) and keep sandbox = \"auto\" or \"require\"")
    if bwrap is None:
        env.update({"FLOYD_CODE": str(ws / "code"), "FLOYD_INPUT": str(ws / "input"),
                    "FLOYD_OUTPUT": str(ws / "output"), "HOME": str(ws / "home"), "TMPDIR": str(ws / "tmp")})
        return Launch(shell, env, str(ws / "code"), "none")
    env.update({"FLOYD_CODE": "/code", "FLOYD_INPUT": "/input", "FLOYD_OUTPUT": "/output",
                "HOME": SANDBOX_HOME, "TMPDIR": "/tmp"})
    if spec.uid is not None:   # system mode: the job user, inside (floydd.agent.jobuser)
        shell = jobuser.switch_args(spec.uid, spec.gid) + shell
    argv = [bwrap, *_bwrap_args(spec, ws), *shell]
    return Launch(argv, env, "/", "bwrap")


def base_args() -> list[str]:
    """The sandbox's own namespaces and limits (jobs and environment builds alike)."""
    args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
    return args


def _bwrap_args(spec: AgentSpec, ws: Path) -> list[str]:
    """The allow-list view (:mod:`.allowlist`), then the job's own folders on top."""
    mounts = sorted(spec.mounts, key=lambda m: m.target.count("/"))
    if not any(m.target == "/input" for m in mounts) and (ws / "input").is_dir():
        mounts.insert(0, BindMount(source="input", target="/input"))
    args = base_args() + allowlist.system_args(gpus=True)
    if spec.uid is not None:   # keep what setpriv needs; the job's /tmp must be writable by it
        args += jobuser.bwrap_caps() + ["--perms", "1777", "--tmpfs", "/tmp"]
    roots = allowlist.python_roots(spec.python_bin) + allowlist.extra_roots()
    args += allowlist.bind_roots(roots, spec.state_dir)
    args += ["--bind", str(ws / "code"), "/code"]
    for mount in mounts:
        args += ["--ro-bind", str(ws / mount.source), mount.target]
    args += ["--bind", str(ws / "output"), "/output", "--bind", str(ws / "home"), SANDBOX_HOME,
             "--remount-ro", "/", "--chdir", "/" if spec.uid is not None else "/code"]
    return args
