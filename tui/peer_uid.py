"""Which local user is at the other end of a loopback TCP connection (Linux: ``/proc/net/tcp``).

TCP has no permissions: any user of a box can connect to a port on 127.0.0.1. But the kernel
knows who made each socket, and lists it: for a connection from a browser to ``floyd top
--serve``, the browser's end is the line of ``/proc/net/tcp`` (or ``tcp6``) whose local
address is our peer's and whose remote address is ours, and its ``uid`` column is the user
running that browser (or the ``ssh`` that forwards it). That is identd's answer, asked of our
own kernel, so nobody can forge it. :func:`peer_uid` returns it, None where there is no such
line; :func:`kernel_tells` whether this system lists connections at all (not on macOS).
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

__all__ = ["peer_uid", "kernel_tells", "proc_address"]

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def kernel_tells() -> bool:
    """Whether :func:`peer_uid` can answer on this system."""
    return _TABLES[0].exists()


def proc_address(ip: str, port: int) -> str:
    """``ip:port`` as ``/proc/net/tcp{,6}`` writes it: the address as 32-bit words in host
    byte order, in hex, then the port in hex."""
    packed = ipaddress.ip_address(ip).packed
    words = "".join(f"{int.from_bytes(packed[i:i + 4], sys.byteorder):08X}" for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def peer_uid(ours: tuple[str, int], theirs: tuple[str, int], *, tables: tuple[Path, ...] = _TABLES) -> int | None:
    """The uid owning the far end (``theirs``) of our connection ``ours`` <- ``theirs``, both on
    this machine; None when the kernel lists no such socket (not a local peer, or gone)."""
    wanted = {(proc_address(local, theirs[1]), proc_address(remote, ours[1]))
              for local in _forms(theirs[0]) for remote in _forms(ours[0])}
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and (fields[1], fields[2]) in wanted:
                try:
                    return int(fields[7])
                except ValueError:
                    return None
    return None


def _forms(ip: str) -> tuple[str, ...]:
    """An address as either table may show it: an IPv4-mapped IPv6 address is also its IPv4
    address (a browser that spoke IPv4 to a server listening on ``::``)."""
    address = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return (str(address), str(address.ipv4_mapped))
    if isinstance(address, ipaddress.IPv4Address):
        return (str(address), f"::ffff:{address}")
    return (str(address),)

