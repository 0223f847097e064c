"""Which test networks exist, who owns them, and removing them by name.

A network is the namespaces ``PREFIX-sw`` and ``PREFIX-n<i>`` plus a marker file
``/run/floydd-netns/PREFIX.json`` saying how many hosts, which subnet, and the PID of the
process that owns it (None for one made by hand with ``python -m tests.netns up``). A network
whose owner is dead is stale: ``cleanup()`` removes it. Nothing is ever matched by anything
but its exact names.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.netns._sys import alive, netns_names, netns_pids, root_links, wait_gone

__all__ = ["MARKERS", "PREFIX", "auto_prefix", "prefix_of", "list_networks", "cleanup", "remove",
           "write_marker", "read_marker"]

MARKERS = Path("/run/floydd-netns")
PREFIX = re.compile(r"^[a-z][a-z0-9]{1,9}$")            # + "-s99" etc. stays <= 15 chars
_AUTO_PREFIX = re.compile(r"^fd\d{1,4}[a-z]$")         # what a test run picks by itself
_OURS = re.compile(r"^(?P<prefix>[a-z][a-z0-9]{1,9})-(?:sw|n\d{1,2})$")  # n0: netem's probe
_seq = [0]


def auto_prefix() -> str:
    """``fd<pid%10000><letter>``, not in use yet (``z`` is kept for netem's probe)."""
    taken = {prefix_of(n) for n in netns_names()} | {p.stem for p in MARKERS.glob("*.json")}
    for _ in range(25):
        letter = "abcdefghijklmnopqrstuvwxy"[_seq[0] % 25]
        _seq[0] += 1
        prefix = f"fd{os.getpid() % 10000}{letter}"
        if prefix not in taken:
            return prefix
    raise RuntimeError("every test network prefix of this process is taken; python -m tests.netns cleanup")


def prefix_of(netns_name: str) -> str | None:
    m = _OURS.match(netns_name)
    return m.group("prefix") if m else None


def list_networks() -> list[dict]:
    """Every test network that exists: prefix, hosts, owner pid, manual, stale."""
    prefixes = {prefix_of(n) for n in netns_names()} - {None}
    prefixes |= {p.stem for p in MARKERS.glob("*.json") if PREFIX.match(p.stem)}
    nets = []
    for prefix in sorted(prefixes):
        marker = read_marker(prefix)
        namespaces = sorted(n for n in netns_names() if prefix_of(n) == prefix)
        owner = marker.get("pid")
        if not marker and not _AUTO_PREFIX.match(prefix):
            continue  # a namespace that merely looks like ours: never touch it
        stale = not marker.get("manual") and not (owner and alive(owner))
        nets.append({"prefix": prefix, "namespaces": namespaces, "hosts": marker.get("hosts"),
                     "octet": marker.get("octet"), "pid": owner, "manual": bool(marker.get("manual")),
                     "stale": stale})
    return nets


def cleanup(prefix: str | None = None, *, everything: bool = False) -> list[str]:
    """Remove the network ``prefix``; without one, every stale one (``everything``: all of ours)."""
    if prefix is not None:
        if not PREFIX.match(prefix):
            raise ValueError(f"not a test network prefix: {prefix!r}")
        targets = [prefix]
    else:
        targets = [n["prefix"] for n in list_networks() if n["stale"] or everything]
    for p in targets:
        remove(p)
    return targets


def remove(prefix: str) -> None:
    """Kill every process in the network's namespaces, delete them and its marker."""
    names = [n for n in netns_names() if prefix_of(n) == prefix]
    for _ in range(3):  # kill, let the dying reap, check nothing new was forked meanwhile
        pids = {pid for ns in names for pid in netns_pids(ns)}
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_gone(pids, 10)
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    # Belt and braces: nothing of ours should ever be in the root namespace, but if a
    # half-made veth ended up there, it has our prefix and goes too.
    ours = re.compile(rf"^{re.escape(prefix)}-(?:[hs]\d{{1,2}}|br)$")
    for link in root_links():
        if ours.match(link):
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
    (MARKERS / f"{prefix}.json").unlink(missing_ok=True)


def write_marker(prefix: str, *, hosts: int, octet: int, manual: bool) -> None:
    """Record a network being made (before its first namespace), owned by this process."""
    MARKERS.mkdir(mode=0o755, parents=True, exist_ok=True)
    marker = {"prefix": prefix, "hosts": hosts, "octet": octet, "manual": manual,
              "pid": None if manual else os.getpid(), "created": time.time()}
    (MARKERS / f"{prefix}.json").write_text(json.dumps(marker) + "\n")


def read_marker(prefix: str) -> dict:
    """The network's marker, or {} when it has none."""
    try:
        return json.loads((MARKERS / f"{prefix}.json").read_text())
    except (OSError, ValueError):
        return {}
