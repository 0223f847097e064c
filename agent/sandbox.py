"""How a job is started: the bubblewrap command line (or none) and the job's environment.

Under bubblewrap the job sees FloydHub's paths::

    /            the host, read-only, entry by entry (so /code, /input... can be created)
    /dev /proc   fresh (GPU device nodes /dev/nvidia* bound in), own pid namespace
    /tmp         a fresh tmpfs
    /home /root  empty tmpfs: other people's files stay out of reach
    STATE        empty tmpfs: no job can see another job's workspace, the store or records
                 (re-exposed read-only: the Python the job runs with and floydd's own code)
    /code        WORKSPACE/code, writable, the working directory
    /input ...   each data mount, read-only
    /output      WORKSPACE/output, writable
    /home/floyd  WORKSPACE/home, $HOME

Without bubblewrap the same folders stay in the workspace and ``FLOYD_CODE``,
``FLOYD_INPUT``, ``FLOYD_OUTPUT`` point there. Either way the job gets
``CUDA_VISIBLE_DEVICES`` (empty when it holds no GPU), ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
``FLOYD_JOB``, ``PYTHONUNBUFFERED=1`` and the spec's env; it inherits the agent's
environment minus anything named ``FLOYD*`` (daemon settings and tokens).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from floydd.agent.spec import AgentSpec, Mount
from floydd.errors import InvalidSpec

__all__ = ["Launch", "resolve_sandbox", "probe_bwrap", "build_launch", "SANDBOX_HOME"]

SANDBOX_HOME = "/home/floyd"
_PROBE_FLAGS = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-ipc")
_OWN_TOP = ("proc", "dev", "tmp")


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
    try:
        proc = subprocess.run([path, *_PROBE_FLAGS, "true"], stdin=subprocess.DEVNULL,
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
    env = {k: v for k, v in base.items() if not k.upper().startswith("FLOYD")}
    env.update(spec.env)
    path = base.get("PATH") or os.defpath
    if spec.python_bin:
        path = f"{spec.python_bin}:{path}"
    userbase, usersite = _user_site()
    if userbase:
        env["PYTHONUSERBASE"] = userbase
    env.update({
        "PATH": path, "PYTHONUNBUFFERED": "1", "FLOYD_JOB": spec.job,
        "CUDA_VISIBLE_DEVICES": ",".join(spec.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    })
    shell = ["/bin/sh", "-c", spec.command]
    if bwrap is None:
        env.update({"FLOYD_CODE": str(ws / "code"), "FLOYD_INPUT": str(ws / "input"),
                    "FLOYD_OUTPUT": str(ws / "output"), "HOME": str(ws / "home"), "TMPDIR": str(ws / "tmp")})
        return Launch(shell, env, str(ws / "code"), "none")
    env.update({"FLOYD_CODE": "/code", "FLOYD_INPUT": "/input", "FLOYD_OUTPUT": "/output",
                "HOME": SANDBOX_HOME, "TMPDIR": "/tmp"})
    visible = _keep_visible(spec, usersite, env.get("PYTHONPATH", ""))
    argv = [bwrap, *_bwrap_args(spec, ws, visible), *shell]
    return Launch(argv, env, "/", "bwrap")


def _bwrap_args(spec: AgentSpec, ws: Path, visible: list[str]) -> list[str]:
    mounts = sorted(spec.mounts, key=lambda m: m.target.count("/"))
    if not any(m.target == "/input" for m in mounts) and (ws / "input").is_dir():
        mounts.insert(0, Mount(source="input", target="/input"))
    ours = {"code", "output"} | {m.target.split("/")[1] for m in mounts}
    args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]
    for name in sorted(os.listdir("/")):
        if name in _OWN_TOP or name in ours:
            continue
        top = "/" + name
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.exists(top):
            args += ["--ro-bind", top, top]
    args += ["--dev", "/dev"]
    for dev in _gpu_devices():
        args += ["--dev-bind", dev, dev]
    args += ["--proc", "/proc", "--tmpfs", "/tmp"]
    hidden = ["/tmp"]
    state = os.path.realpath(spec.state_dir) if spec.state_dir else None
    for path in ("/home", "/root", state):
        if path and os.path.isdir(path) and not _under_any(path, hidden):
            args += ["--tmpfs", path]
            hidden.append(path)
    for path in visible:
        if _under_any(path, hidden) and path not in hidden and os.path.exists(path):
            args += ["--ro-bind", path, path]
    args += ["--bind", str(ws / "code"), "/code"]
    for mount in mounts:
        args += ["--ro-bind", str(ws / mount.source), mount.target]
    args += ["--bind", str(ws / "output"), "/output", "--bind", str(ws / "home"), SANDBOX_HOME,
             "--chdir", "/code"]
    return args


def _keep_visible(spec: AgentSpec, usersite: str | None, pythonpath: str) -> list[str]:
    """Folders the job needs even when they lie under a hidden one (/root, /home, STATE)."""
    found: list[str] = []
    if spec.python_bin:
        bindir = Path(spec.python_bin)
        found.append(str(bindir.parent.resolve()))
        found += _venv_base(bindir.parent)
        for exe in ("python3", "python"):
            if (bindir / exe).exists():
                found.append(str((bindir / exe).resolve().parent.parent))
                break
    found += [sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)]
    import floydd
    import floydd.agent
    for module in (floydd, floydd.agent):
        found.append(str(Path(module.__file__).resolve().parent.parent))
    if usersite:
        found.append(usersite)
    found += [p for p in pythonpath.split(":") if p.startswith("/")]
    unique: list[str] = []
    for path in found:
        path = os.path.normpath(path)
        if path not in unique and path != "/":
            unique.append(path)
    return unique


def _venv_base(venv: Path) -> list[str]:
    cfg = venv / "pyvenv.cfg"
    try:
        lines = cfg.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return [str(Path(value.strip()).resolve().parent)]
    return []


def _user_site() -> tuple[str | None, str | None]:
    """The daemon's user site-packages when it has one (jobs get another $HOME)."""
    if not site.ENABLE_USER_SITE:
        return None, None
    usersite = site.getusersitepackages()
    if not os.path.isdir(usersite):
        return None, None
    return site.getuserbase(), usersite


def _gpu_devices() -> list[str]:
    """/dev/nvidia* (and /dev/dri): the job picks its GPUs with CUDA_VISIBLE_DEVICES."""
    try:
        names = os.listdir("/dev")
    except OSError:
        return []
    return [f"/dev/{n}" for n in sorted(names) if n.startswith("nvidia") or n == "dri"]


def _under_any(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
