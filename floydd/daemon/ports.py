"""Bind a TCP listener, or say in one line which port and which setting could not be had.

A port another program holds (or one this user may not bind) is the operator's to fix, not a
bug in floydd: ``floydd start`` ends with "error: port 7655 (api_listen 0.0.0.0:7655) is
already in use" and a hint naming the setting to change, never an "internal error" with a
traceback hint (issue 21).
"""

from __future__ import annotations

import errno

from aiohttp import web

from floydd.errors import UserError

__all__ = ["start_site", "bind_refusal"]

_WHY = {errno.EADDRINUSE: "is already in use", errno.EACCES: "needs privileges this user lacks",
        errno.EADDRNOTAVAIL: "has an address that is not on this box"}


async def start_site(site: web.TCPSite, *, setting: str, host: str, port: int, set_in: str = "") -> None:
    """``site.start()``; a port that cannot be bound is a :class:`UserError` naming ``setting``
    (and ``set_in``, where it is changed, when that is not obvious from its name)."""
    try:
        await site.start()
    except OSError as exc:
        raise bind_refusal(exc, setting=setting, host=host, port=port, set_in=set_in) from None


def bind_refusal(exc: OSError, *, setting: str, host: str, port: int, set_in: str = "") -> UserError:
    """The refusal for a listener on ``host:port`` (configured by ``setting``) that failed with ``exc``."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    why = _WHY.get(exc.errno or 0, f"cannot be bound ({exc.strerror or exc})")
    change = f"set {setting} to another HOST:PORT" + (f" ({set_in})" if set_in else "")
    if exc.errno == errno.EADDRINUSE:
        hint = f"stop what holds it (ss -ltnp 'sport = :{port}' says what), or {change}"
    elif exc.errno == errno.EACCES:
        hint = f"use a port above 1023: {change}"
    else:
        hint = f"use an address of this box (ip -brief address lists them): {change}"
    return UserError(f"port {port} ({setting} {where}) {why}", hint=hint, code="port_unavailable")
