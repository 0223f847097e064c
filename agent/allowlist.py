"""What of the host a sandboxed process sees: an allow-list, never the host's root.

Jobs and environment builds (``floyd_requirements.txt``) get the same view; bubblewrap
starts from an empty root and binds in only::

    /usr /bin /sbin /lib*   read-only; top-level symlinks (merged /usr) stay symlinks
    /etc                    only the entries of ETC (read-only), each for a reason below
    /sys                    read-only: NVML and NCCL read the GPUs' PCI topology there, torch
                            and psutil the CPU layout
    /dev                    minimal (null, zero, random, tty, pts, shm), plus the GPU device
                            nodes /dev/nvidia* and /dev/dri (jobs only)
    /proc                   a fresh one, for the sandbox's own pid namespace
    /tmp                    a private tmpfs
    /                       the sandbox's own root, read-only once everything is in place
                            (folders bwrap made for the binds cannot be written either)
    the Python              the prefix of the interpreter the process runs (a venv and the
                            installation it was made from, resolved through ``pyvenv.cfg`` and
                            symlinks: /usr/local, /opt, ~/.pyenv/versions/X, wherever it lives),
                            the daemon's own prefixes, floydd's package folders and the
                            daemon's user site-packages: each read-only, computed, never a
                            parent folder such as a home

Everything else (``/home``, ``/root``, ``/var``, ``/srv``, ``/opt``, ``/mnt``, ``/run``, the
state folder with the store, its secret, the records, other jobs' workspaces and the
daemon's socket) does not exist inside. Should a Python prefix contain the state folder,
the state folder is hidden again by an empty tmpfs.
"""

from __future__ import annotations

import glob
import os
import site
import sys
from pathlib import Path

__all__ = ["ETC", "system_args", "python_roots", "extra_roots", "bind_roots", "user_site", "under_any"]

ETC = (
    # user and group names of uids (whoami, getpass, ssh, torch's cache paths); world-readable
    # on every host, and without password hashes (those are in shadow, which stays out)
    "passwd", "group",
    # name resolution: downloads, distributed training's rendezvous by host name
    "nsswitch.conf", "host.conf", "hosts", "resolv.conf", "gai.conf", "services", "protocols",
    # TLS trust roots (Debian: ssl, ca-certificates; Red Hat: pki, crypto-policies)
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies",
    # the dynamic linker finds shared libraries (CUDA, libstdc++) through these
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    # the host's time zone
    "localtime", "timezone",
    # Debian's /usr/bin links (java, cc, python...) point through alternatives; the system
    # Python's sitecustomize lives in python3.*; platform checks read os-release
    "alternatives", "python3*", "os-release", "lsb-release",
    # mimetypes, fontconfig (matplotlib), GPU compute/graphics vendor files
    "mime.types", "fonts", "OpenCL", "vulkan",
    # the site's pip configuration (an index mirror, a wheelhouse) for environment builds
    "pip.conf",
)
"""The entries of the host's /etc a sandboxed process sees (globs allowed). Not among them:
shadow, sudoers, ssh host keys, the daemon's own config (/etc/floydd), cron, environment."""

_SYSTEM = ("usr", "bin", "sbin")


def system_args(*, gpus: bool = True, root: str = "/") -> list[str]:
    """bwrap arguments for the system part of the view: folders, /etc, /sys, /dev, /proc, /tmp."""
    args: list[str] = []
    tops = sorted(n for n in _listdir(root) if n in _SYSTEM or n.startswith("lib"))
    for name in tops:
        path = os.path.join(root, name)
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), "/" + name]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, "/" + name]
    etc = os.path.join(root, "etc")
    args += ["--dir", "/etc"]
    for pattern in ETC:
        for path in sorted(glob.glob(os.path.join(etc, pattern))):
            real = os.path.realpath(path)
            if os.path.exists(real):  # a link out of /etc (resolv.conf → /run/...): bind what it names
                args += ["--ro-bind", real, "/etc/" + os.path.basename(path)]
    if os.path.isdir(os.path.join(root, "sys")):
        args += ["--ro-bind", os.path.join(root, "sys"), "/sys"]
    args += ["--dev", "/dev"]
    if gpus:
        for dev in _gpu_devices(root):
            args += ["--dev-bind", dev, "/dev/" + os.path.basename(dev)]
    args += ["--proc", "/proc", "--tmpfs", "/tmp"]
    return args


def python_roots(python_bin: str | None) -> list[str]:
    """The prefixes the Python in ``python_bin`` needs (a venv: itself and its base), and
    the daemon's own (``sys.prefix``, ``sys.base_prefix``), each as given and resolved."""
    found: list[str] = [sys.prefix, sys.base_prefix]
    if python_bin:
        bindir = Path(python_bin)
        home = _venv_home(bindir.parent)
        if home is not None:
            found.append(str(bindir.parent))
            bindir = Path(home)
        for exe in ("python3", "python"):
            if (bindir / exe).exists():
                found.append(str(bindir.parent))
                found.append(str(Path(os.path.realpath(bindir / exe)).parent.parent))
                break
    return _unique(p for path in found for p in (path, os.path.realpath(path)))


def extra_roots() -> list[str]:
    """Folders outside the prefixes the daemon's Python imports from: floydd's own packages
    (an editable install points into a checkout) and the user's site-packages."""
    import floydd
    import floydd.agent
    found = [str(Path(module.__file__).resolve().parent) for module in (floydd, floydd.agent)]
    usersite = user_site()
    if usersite:
        found.append(usersite[1])
    return _unique(found)


def bind_roots(roots: list[str], state_dir: str | None) -> list[str]:
    """``--ro-bind`` each root (shallowest first; a root inside another is left to it). Should
    one hold ``state_dir``, the state folder is hidden again by a tmpfs, and the roots inside
    it (a cached venv of an environment build) are bound after that."""
    state = os.path.realpath(state_dir) if state_dir else None
    roots = _unique(roots)
    inside = [r for r in roots if state and under_any(os.path.realpath(r), [state])]
    outer, kept = _binds([r for r in roots if r not in inside])
    if state and any(under_any(state, [root]) for root in kept):
        outer += ["--tmpfs", state]
    return outer + _binds(inside)[0]


def user_site() -> tuple[str, str] | None:
    """``(user base, user site-packages)`` of the daemon's user, when there is one: jobs get
    another $HOME, so ``PYTHONUSERBASE`` points them back at it."""
    if not site.ENABLE_USER_SITE or not os.path.isdir(site.getusersitepackages()):
        return None
    return site.getuserbase(), site.getusersitepackages()


def _binds(roots: list[str]) -> tuple[list[str], list[str]]:
    args: list[str] = []
    kept: list[str] = []
    for path in sorted(roots, key=lambda p: (p.count("/"), p)):
        if path == "/" or under_any(path, kept) or not os.path.exists(path):
            continue
        kept.append(path)
        args += ["--ro-bind", os.path.realpath(path), path]
    return args, kept


def under_any(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies below one."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _venv_home(prefix: Path) -> str | None:
    """The ``home`` (the base interpreter's bin folder) of a venv's pyvenv.cfg, or None."""
    try:
        lines = (prefix / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return value.strip()
    return None


def _gpu_devices(root: str) -> list[str]:
    """/dev/nvidia* (and /dev/dri): the job picks its GPUs with CUDA_VISIBLE_DEVICES."""
    dev = os.path.join(root, "dev")
    return [os.path.join(dev, n) for n in sorted(_listdir(dev)) if n.startswith("nvidia") or n == "dri"]


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _unique(paths) -> list[str]:
    out: list[str] = []
    for path in paths:
        path = os.path.normpath(path)
        if path not in out:
            out.append(path)
    return out
