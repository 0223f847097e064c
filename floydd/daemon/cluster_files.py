"""What a node keeps about its cluster, and the offline steps of ``floydd init/join/recover``.

    STATE/ca/            the cluster CA (only on the node that ran ``floydd init``)
    STATE/tls/           this node's key, certificate and the CA certificate
    STATE/cluster/       raft log and peers (the control plane's own files; a box alone has
                         them too: it is a one-voter cluster)
    STATE/cluster.json   {"name", "listen", "advertise", "seeds", "pending", "join"}

``pending`` tells the next daemon start what to do once: ``bootstrap`` (found a
cluster of this node), ``join`` (ask the ``join`` addresses for a seat) or
``recover`` (rewrite the log as a new one-node cluster). A node without
``cluster.json`` is a box alone, a one-voter cluster: nothing listens beyond loopback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from floydd.config import DEFAULT_API_PORT, DEFAULT_PORT
from floydd.errors import Conflict, UserError
from floydd.model import FINAL_STATES

__all__ = ["ClusterSettings", "read_settings", "write_settings", "split_address", "guess_address", "api_address",
           "DEFAULT_PORT", "DEFAULT_API_PORT", "install_store_secret", "check_can_join", "leave_own_cluster"]

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
    admin: str = ""
    """Who ran ``floydd init``: recorded as the cluster's first admin when it is made."""
    api_listen: str = ""
    """Where the ``/v1`` API is served over TLS for people elsewhere (``floyd login``): empty,
    the host of ``listen`` and port 7655 (whatever port ``listen`` has: a box given the port
    after another's must not collide with it); ``off``: not served."""


def api_address(settings: ClusterSettings) -> tuple[str, int] | None:
    """Where the remote ``/v1`` API binds (``api_listen``), or None when it is ``off``."""
    if settings.api_listen == "off":
        return None
    if settings.api_listen:
        return split_address(settings.api_listen, DEFAULT_API_PORT)
    host, _port = split_address(settings.listen)
    return host, DEFAULT_API_PORT


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


def check_can_join(state_dir: Path) -> None:
    """Refuse to join another cluster while this box's own has jobs that did not end (a queued
    job would be lost: the other cluster does not know it)."""
    from floydd.cluster.recover import read_state
    state = read_state(Path(state_dir) / "cluster" / "raft.db")
    unfinished = sorted(k for k, j in state.jobs.items() if j.state not in FINAL_STATES)
    if unfinished:
        more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
        raise Conflict(f"{len(unfinished)} job(s) of this box have not ended: {', '.join(unfinished[:5])}{more}",
                       hint="start the daemon and wait for them or stop them (floyd status, floyd stop), then "
                            "join; nothing was sent to the cluster yet")


def leave_own_cluster(state_dir: Path, records_path: Path, store_dir: Path, secret: bytes) -> None:
    """After a join was accepted: this box's jobs become its history (listed, not the new
    cluster's), its own control-plane log is kept aside in ``STATE/cluster.before-join-*``,
    and its store is set to be re-sealed under the cluster's secret on the next start
    (resumable; its datasets then enter the cluster's catalog). Each step may be repeated."""
    from floydd.records import Records
    with Records(records_path) as records:
        records.make_history()
    own = Path(state_dir) / "cluster"
    if own.exists():
        os.replace(own, Path(state_dir) / f"cluster.before-join-{int(time.time())}")
    install_store_secret(store_dir, secret)


def install_store_secret(store_dir: Path, secret: bytes) -> None:
    """Give this node the cluster's store secret (0600). A store that holds data under its own
    secret is re-sealed under the cluster's when the daemon next starts (:mod:`floydd.store.keys.rekey`)."""
    from floydd.store.keys.crypto import write_secret
    from floydd.store.keys.rekey import begin_rekey
    store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        write_secret(store_dir / "key", secret)
    except FileExistsError:
        begin_rekey(store_dir, secret)          # a no-op when it is the same secret
