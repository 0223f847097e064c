"""Thin wrappers over ``ip`` and process bookkeeping, for the test network."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["ip", "netns_names", "netns_pids", "root_links", "killpg", "alive", "wait_gone"]


def ip(*args: str, ns: str | None = None) -> str:
    """``ip [-n NS] ARGS``; raises with ip's own message when it fails."""
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {res.stderr.strip()}")
    return res.stdout


def netns_names() -> list[str]:
    """Every named network namespace (``ip netns list``)."""
    res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def netns_pids(ns: str) -> set[int]:
    """The processes living in namespace ``ns``."""
    res = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return {int(p) for p in res.stdout.split() if p.isdigit()}


def root_links() -> list[str]:
    """Link names in the root namespace."""
    res = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30)
    return [line.split(":")[1].strip().split("@")[0] for line in res.stdout.splitlines() if ":" in line]


def killpg(pid: int) -> None:
    """SIGKILL the process group a child of ours leads (it was started in a new session)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def alive(pid: int) -> bool:
    """Does ``pid`` exist (a zombie counts)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_gone(pids: set[int], timeout: float) -> None:
    """Wait until none of ``pids`` runs (exited or zombie), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) and not zombie(p) for p in pids):
            return
        time.sleep(0.02)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
