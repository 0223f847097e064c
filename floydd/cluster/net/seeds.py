"""Static seed addresses: how a node finds its cluster where multicast does not reach.

A seed is ``HOST:PORT``, ``HOST`` (the default port) or ``[IPv6]:PORT``; ``HOST`` may be a
name, resolved later by whoever connects. Discovery lists seeds as peers with an unknown node
id until the cluster layer has talked to them (:meth:`floydd.cluster.net.discovery.Discovery.resolve_seed`).
"""

from __future__ import annotations

from collections.abc import Iterable

from floydd.errors import InvalidSpec

__all__ = ["DEFAULT_PORT", "Seed", "parse_seed", "parse_seeds"]

DEFAULT_PORT = 7654

Seed = tuple[str, int]
"""``(host, port)``; ``host`` is an address or a name, IPv6 without brackets."""


def parse_seed(text: str, default_port: int = DEFAULT_PORT) -> Seed:
    """``"10.0.0.5:7654"`` -> ``("10.0.0.5", 7654)``; raises :class:`InvalidSpec` when malformed."""
    raw = text.strip()
    host, port = raw, str(default_port)
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0 or (end + 1 < len(raw) and raw[end + 1] != ":"):
            raise _bad(text, "an IPv6 seed is written [ADDRESS]:PORT")
        host = raw[1:end]
        if end + 1 < len(raw):
            port = raw[end + 2:]
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    elif raw.count(":") > 1:
        raise _bad(text, "write an IPv6 seed in brackets: [ADDRESS]:PORT")
    if not host or any(c.isspace() or c in "/@" for c in host):
        raise _bad(text, "expected HOST:PORT, e.g. 10.0.0.5:7654")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise _bad(text, "the port must be a number from 1 to 65535")
    return host, int(port)


def parse_seeds(texts: Iterable[str], default_port: int = DEFAULT_PORT) -> tuple[Seed, ...]:
    """Parse several seeds, dropping duplicates but keeping their order."""
    return tuple(dict.fromkeys(parse_seed(t, default_port) for t in texts))


def _bad(text: str, hint: str) -> InvalidSpec:
    return InvalidSpec(f"bad seed address {text!r}", hint=hint)
