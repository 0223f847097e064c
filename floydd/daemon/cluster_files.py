"""What a node keeps about its cluster, and the offline steps of ``floydd init/join/recover``.

    STATE/ca/            the cluster CA (only on the node that ran ``floydd init``)
    STATE/tls/           this node's key, certificate and the CA certificate
    STATE/cluster/       raft log and peers (the control plane's own files)
    STATE/cluster.json   {"name", "listen", "advertise", "seeds", "pending", "join"}

``pending`` tells the next daemon start what to do once: ``bootstrap`` (found a
cluster of this node), ``join`` (ask the ``join`` addresses for a seat) or
``recover`` (rewrite the log as a new one-node cluster). A node without
``cluster.json`` is a single box: nothing listens beyond loopback.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from floydd.errors import Conflict, UserError

__all__ = ["ClusterSettings", "read_settings", "write_settings", "split_address", "guess_address",
           "DEFAULT_PORT", "install_store_secret"]

DEFAULT_PORT = 7654
SETTINGS = "cluster.json"


@dataclass(kw_only=True)
class ClusterSettings:
    name: str
    listen: str = f"0.0.0.0:{DEFAULT_PORT}"
    """Where the node-to-node mTLS listener binds."""
    advertise: str = ""
    """``HOST:PORT`` peers use to reach this node (default: this box's first LAN address)."""
    seeds: list[str] = field(default_factory=list)
    """Static peer addresses for networks without multicast."""
    pending: str = ""
    join: list[str] = field(default_factory=list)
    discovery: bool = True
    """Announce and browse ``_floydd._tcp`` with zeroconf."""


def read_settings(state_dir: Path) -> ClusterSettings | None:
    path = Path(state_dir) / SETTINGS
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise UserError(f"{path} is damaged", hint="fix the JSON or run floydd init/join again") from None
    return ClusterSettings(**data)


def write_settings(state_dir: Path, settings: ClusterSettings) -> None:
    path = Path(state_dir) / SETTINGS
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(settings), indent=2) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def split_address(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep:
        host, port = str(text), str(default_port)
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        return host, int(port)
    except ValueError:
        raise UserError(f"{text!r} is not an IP address with a port", hint="write e.g. 192.168.1.20:7654") from None


def guess_address() -> str:
    """This box's first non-loopback IPv4 address (what peers on the LAN reach it at)."""
    for _name, addrs in sorted(psutil.net_if_addrs().items()):
        for addr in addrs:
            if addr.family.name == "AF_INET" and not ipaddress.ip_address(addr.address).is_loopback:
                return addr.address
    raise UserError("this box has no LAN address", hint="give one with --advertise HOST:PORT")


def install_store_secret(store_dir: Path, secret: bytes) -> None:
    """Write the cluster's store secret for a joining node (0600); refuse to replace another."""
    store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = store_dir / "key"
    if key.exists():
        if key.read_text().strip() == secret.hex():
            return
        raise Conflict(f"{store_dir} already holds data sealed with another key",
                       hint="join with a fresh state folder (--state-dir), or move the old store aside")
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
