"""A token bucket per source address, for join attempts and failed authentications.

A join token has 128 random bits, so guessing one is hopeless; the limit is there so that a
box on the LAN hammering ``/cluster/v1/join`` (a script gone wrong, a scanner) costs the
voters little and shows up in the log, without ever blocking an operator who types a token
wrong a few times. Each address may make ``burst`` attempts at once, then one more every
``1 / rate`` seconds. Addresses are forgotten once their bucket is full again; at most
``max_addresses`` are tracked (the least recently seen are dropped first), so a flood of
spoofed sources cannot grow it without bound.

The TLS API uses the same buckets for failed authentications (:mod:`floydd.api.throttle`):
only a failure takes from the bucket (:meth:`RateLimiter.take`), and :meth:`RateLimiter.waiting`
says, without counting anything, whether a source has none left, so that its next request is
answered 429 before its token is even looked at.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    def __init__(self, *, rate: float, burst: int, max_addresses: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be above 0 and burst at least 1")
        self.rate, self.burst, self.max_addresses = rate, burst, max_addresses
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()   # address -> (tokens, at)

    def take(self, address: str) -> float:
        """Count one attempt from ``address``: 0 if it may go ahead, else the seconds to wait."""
        now = self._clock()
        tokens, at = self._buckets.pop(address, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1:
            tokens -= 1
            wait = 0.0
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[address] = (tokens, now)
        self._forget(now)
        return wait

    def waiting(self, address: str) -> float:
        """The seconds until ``address`` may make one more attempt (0: now), counting nothing."""
        entry = self._buckets.get(address)
        if entry is None:
            return 0.0
        tokens, at = entry
        tokens = min(float(self.burst), tokens + (self._clock() - at) * self.rate)
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)

    def _forget(self, now: float) -> None:
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
        for address, (tokens, at) in list(self._buckets.items()):   # oldest first: stop at the first still draining
            if tokens + (now - at) * self.rate < self.burst:
                break
            del self._buckets[address]
