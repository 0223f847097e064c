"""A failed connection in words: "cannot reach box2 at 10.0.0.2:7654: connection refused".

aiohttp's errors read like "Cannot connect to host 10.0.0.2:7654 ssl:<ssl.SSLContext object at
0x7f…> [Connect call failed ('10.0.0.2', 7654)]"; passed through, that reached people in ``floyd
data info``, peer fetches and logs from another box (issue 21). Every place a connection to
another box fails says what it tried to reach and why, in the words here.

Duck-typed on purpose (the class names and ``os_error`` / ``certificate_error`` attributes of
aiohttp's connector errors, the stdlib's OSError and ssl errors): ``floyd``'s CLI uses it too
and never loads aiohttp (tests/unit/test_layering.py).
"""

from __future__ import annotations

import asyncio
import errno
import re
import ssl

__all__ = ["why", "cannot_reach"]

_ERRNO = {errno.ECONNREFUSED: "connection refused (nothing listens on that port, or floydd is not running)",
          errno.EHOSTUNREACH: "no route to host", errno.ENETUNREACH: "network unreachable",
          errno.ETIMEDOUT: "timed out", errno.ECONNRESET: "connection reset",
          errno.ECONNABORTED: "connection aborted", errno.EPIPE: "connection closed",
          errno.EADDRNOTAVAIL: "address not available"}


def cannot_reach(what: str, address: str | None, exc: BaseException) -> str:
    """``cannot reach WHAT at ADDRESS: WHY`` (without ``at`` when the address is unknown)."""
    at = f" at {address}" if address else ""
    return f"cannot reach {what}{at}: {why(exc)}"


def why(exc: BaseException) -> str:
    """Why a connection failed, in a few words (never an object's repr)."""
    for cause in _chain(exc):
        said = _words(cause)
        if said:
            return said
    name = type(exc).__name__
    return f"{name}: {_plain(str(exc))}" if str(exc) else name


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, then what it wraps (aiohttp's ``os_error``/``certificate_error``, __cause__, __context__)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop(0)
        if item is None or any(item is s for s in seen) or len(seen) > 8:
            continue
        seen.append(item)
        todo += [getattr(item, "certificate_error", None), getattr(item, "os_error", None),
                 item.__cause__, item.__context__]
    return seen


def _words(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or "verify failed"
        return f"its TLS certificate was refused ({detail})"
    if isinstance(exc, ssl.SSLError):
        return f"the TLS handshake failed ({getattr(exc, 'reason', None) or _plain(str(exc))})"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or name in ("ServerTimeoutError", "ConnectionTimeoutError",
                                                                          "SocketTimeoutError"):
        return "no answer in time"
    if name == "ServerDisconnectedError":
        return "the connection was closed before an answer"
    if name in ("ClientConnectorDNSError",) or (isinstance(exc, OSError) and exc.errno in (-2, -3, -5)):
        return "its name does not resolve"
    if isinstance(exc, OSError) and exc.errno in _ERRNO:
        return _ERRNO[exc.errno]
    if isinstance(exc, ConnectionRefusedError):
        return _ERRNO[errno.ECONNREFUSED]
    if isinstance(exc, ConnectionResetError):
        return _ERRNO[errno.ECONNRESET]
    return ""


def _plain(text: str) -> str:
    """``text`` without aiohttp's ``ssl:<...>`` and ``[...]`` parts, short."""
    text = re.sub(r"\s*ssl:(<[^>]*>|\S+)", "", text)
    text = re.sub(r"\s*\[[^\]]*\]", "", text)
    return text.strip()[:160]
