"""The per-address token bucket in front of joins, and when a certificate is due for renewal."""

from __future__ import annotations

import pytest

from floydd.daemon.renewal import check_interval, renew_due
from floydd.security.ca import CLOCK_SKEW
from floydd.security.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_one_attempt_per_period_per_address():
    clock = Clock()
    limiter = RateLimiter(rate=0.5, burst=3, clock=clock)
    assert [limiter.take("10.0.0.9") for _ in range(3)] == [0, 0, 0]
    assert limiter.take("10.0.0.9") == pytest.approx(2.0)
    assert limiter.take("10.0.0.7") == 0          # another address has its own bucket
    clock.now += 2.0
    assert limiter.take("10.0.0.9") == 0
    assert limiter.take("10.0.0.9") > 0


def test_refused_attempts_do_not_earn_credit_and_full_buckets_are_forgotten():
    clock = Clock()
    limiter = RateLimiter(rate=1.0, burst=1, clock=clock)
    limiter.take("a")
    waits = [limiter.take("a") for _ in range(3)]
    assert all(w > 0 for w in waits)
    clock.now += 100
    limiter.take("b")
    assert len(limiter) == 1                        # "a" refilled long ago: forgotten


def test_the_number_of_addresses_tracked_is_bounded():
    limiter = RateLimiter(rate=0.001, burst=1, max_addresses=50, clock=Clock())
    for i in range(500):
        limiter.take(f"10.0.{i // 256}.{i % 256}")
    assert len(limiter) == 50


@pytest.mark.parametrize("bad", [dict(rate=0, burst=1), dict(rate=1, burst=0)])
def test_nonsense_settings_are_refused(bad):
    with pytest.raises(ValueError):
        RateLimiter(**bad)


def test_renewal_is_due_with_a_third_of_the_life_left_or_a_fixed_margin():
    skew = CLOCK_SKEW.total_seconds()
    issued = 1000.0
    not_before, not_after = issued - skew, issued + 60
    assert not renew_due(not_before, not_after, issued + 39)
    assert renew_due(not_before, not_after, issued + 41)
    assert not renew_due(not_before, not_after, issued + 49, before=10)
    assert renew_due(not_before, not_after, issued + 51, before=10)
    assert check_interval(not_before, not_after) == 3.0
    year = 365 * 86400.0
    assert check_interval(issued - skew, issued + year) == 60.0
    assert not renew_due(issued - skew, issued + year, issued + 0.6 * year)
    assert renew_due(issued - skew, issued + year, issued + 0.7 * year)
