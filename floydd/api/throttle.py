"""Failed authentications on the TLS API: throttled per source, logged in aggregate.

A personal token has 128 random bits, so guessing one is hopeless; what a flood of bad tokens
costs is the box's time and its log (one line a request filled the journal at ~2,000 a
second). So each source may fail ``api_auth_failures`` times at once, then that many per
``api_auth_window`` seconds (a token bucket, :class:`floydd.security.ratelimit.RateLimiter`);
past that its requests are answered 429 with ``Retry-After`` before their token is looked
at (:meth:`AuthThrottle.wait` counts nothing and parses nothing). A source is an IPv4
address or an IPv6 /64 (one machine's share of addresses). A good token from another source
is never slowed; a good token from a throttled source waits like a bad one (it is the
address that is throttled, the token is not read).

The log gets one line for a source's first refusal (its reason: "token revoked" is worth
seeing at once), then at most one line per source per window, counting what was refused
meanwhile ("refused 2,214 bad tokens from 10.0.0.9 in the last 60 s, 2,190 of them with 429
unchecked; last: ..."), written by a timer (:meth:`AuthThrottle.flush`) so the count of a
flood that stopped is not lost.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from floydd import log
from floydd.errors import Unavailable, UserError
from floydd.security.ratelimit import RateLimiter

__all__ = ["AuthThrottle", "THROTTLE", "install", "source_of"]

_MAX_TALLIES = 4096


def source_of(remote: str | None) -> str:
    """The key a request is throttled by: its IPv4 address, or its IPv6 /64."""
    try:
        ip = ipaddress.ip_address((remote or "").split("%")[0])
    except ValueError:
        return remote or "?"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass(slots=True)
class _Tally:
    since: float
    refused: int = 0            # tokens checked and refused since the last line
    unchecked: int = 0          # answered 429 without a check since the last line
    last: str = ""


class AuthThrottle:
    """The per-source limit on failed authentications and their aggregate log (module docstring)."""

    def __init__(self, *, failures: int, window: float, clock: Callable[[], float] = time.monotonic,
                 logger: Any = None) -> None:
        if failures < 1 or window <= 0:
            raise ValueError("failures must be at least 1 and window above 0")
        self.failures, self.window = failures, window
        self.limiter = RateLimiter(rate=failures / window, burst=failures, clock=clock)
        self._clock = clock
        self._log = logger if logger is not None else log.api
        self._tallies: dict[str, _Tally] = {}
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    def from_config(cls, config: Any) -> AuthThrottle:
        if config.api_auth_failures < 1 or not config.api_auth_window > 0:
            raise UserError(f"api_auth_failures={config.api_auth_failures} api_auth_window={config.api_auth_window} "
                            "cannot throttle anything", hint="set api_auth_failures to 1 or more and "
                            "api_auth_window to seconds above 0 (the defaults are 20 and 60)")
        return cls(failures=config.api_auth_failures, window=config.api_auth_window)

    def wait(self, source: str) -> float:
        """Seconds before ``source`` may have a token checked again (0: now); counts nothing."""
        return self.limiter.waiting(source)

    def failed(self, source: str, reason: str) -> None:
        """A token from ``source`` was checked and refused."""
        self.limiter.take(source)
        tally = self._tallies.get(source)
        if tally is None:
            self._open(source)
            self._log.warning("refused a personal token from %s: %s (more from it are counted: one line per %s s)",
                              source, reason, _n(self.window))
            return
        tally.refused += 1
        tally.last = reason

    def refusal(self, source: str, wait: float) -> web.Response:
        """The 429 a throttled ``source`` gets instead of a check (counted for the log)."""
        tally = self._tallies.get(source) or self._open(source)
        tally.unchecked += 1
        seconds = max(1, math.ceil(wait))
        exc = Unavailable(f"too many failed authentications from {source}; try again in {seconds} s",
                          code="auth_throttled",
                          hint=f"check your token (floyd login again with a good one): an address may fail "
                               f"{self.failures} times per {_n(self.window)} s")
        return web.json_response(exc.to_payload(), status=429, headers={"Retry-After": str(seconds)})

    def flush(self) -> list[str]:
        """Log one line per source with refusals counted over a whole window; forget sources
        quiet for a window. Returns the lines (the timer calls it; tests may too)."""
        now, lines = self._clock(), []
        for source, tally in list(self._tallies.items()):
            if now - tally.since < self.window:
                continue
            if tally.refused or tally.unchecked:
                total = tally.refused + tally.unchecked
                line = (f"refused {total:,} bad token{'s' if total != 1 else ''} from {source} in the last "
                        f"{_n(now - tally.since)} s")
                if tally.unchecked:
                    line += f", {tally.unchecked:,} of them with 429 unchecked"
                if tally.last:
                    line += f"; last: {tally.last}"
                self._log.warning("%s", line)
                lines.append(line)
                self._tallies[source] = _Tally(since=now)
            else:
                del self._tallies[source]
        return lines

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()

    def _open(self, source: str) -> _Tally:
        if len(self._tallies) >= _MAX_TALLIES:
            self._tallies.pop(next(iter(self._tallies)))
        tally = self._tallies[source] = _Tally(since=self._clock())
        self._arm()
        return tally

    def _arm(self) -> None:
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return                  # no loop (a unit test): flush() is called by hand
        self._timer = loop.call_later(self.window, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.flush()
        if self._tallies:
            self._arm()


THROTTLE = web.AppKey("auth_throttle", AuthThrottle)
"""The app's :class:`AuthThrottle` (:func:`install`)."""


def install(app: web.Application, config: Any) -> None:
    """Give ``app`` its throttle (``config.api_auth_failures`` per ``config.api_auth_window``
    seconds); its timer stops with the app."""
    throttle = app[THROTTLE] = AuthThrottle.from_config(config)

    async def stop(_app: web.Application) -> None:
        throttle.close()
    app.on_cleanup.append(stop)


def _n(seconds: float) -> str:
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}".rstrip("0").rstrip(".")
