"""Failed tokens on the TLS API: the per-source limit and its aggregate log (floydd.api.throttle),
with a fake clock and a recording logger (the real server: tests/integration/security/test_remote_api.py)."""

from __future__ import annotations

import json

import pytest

from floydd.api.throttle import AuthThrottle, source_of
from floydd.config import preset_for_tests
from floydd.errors import UserError
from floydd.security.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, fmt: str, *args) -> None:
        self.lines.append(fmt % args)


def _throttle(failures: int = 3, window: float = 60.0):
    clock, lines = Clock(), Lines()
    return AuthThrottle(failures=failures, window=window, clock=clock, logger=lines), clock, lines


def test_a_source_is_answered_429_after_its_failures_and_checked_again_at_the_rate():
    throttle, clock, _ = _throttle(failures=3, window=60.0)
    for _ in range(3):
        assert throttle.wait("10.0.0.9") == 0
        throttle.failed("10.0.0.9", "the API token is malformed")
    assert throttle.wait("10.0.0.9") == pytest.approx(20.0)     # one more every 60/3 s
    assert throttle.wait("10.0.0.7") == 0                       # another source is not slowed
    assert throttle.wait("10.0.0.9") == pytest.approx(20.0)     # asking counts nothing
    clock.now += 20.0
    assert throttle.wait("10.0.0.9") == 0


def test_the_429_says_when_to_retry_in_its_header_and_its_message():
    throttle, _, _ = _throttle(failures=1)
    throttle.failed("10.0.0.9", "bad")
    answer = throttle.refusal("10.0.0.9", throttle.wait("10.0.0.9"))
    assert answer.status == 429 and answer.headers["Retry-After"] == "60"
    error = json.loads(answer.body)["error"]
    assert error["code"] == "auth_throttled" and "try again in 60 s" in error["message"]
    assert "floyd login" in error["hint"]


def test_one_line_for_the_first_refusal_then_one_per_window_counting_the_rest():
    throttle, clock, lines = _throttle(failures=3, window=60.0)
    for i in range(2214):
        if throttle.wait("10.0.0.9") > 0:
            throttle.refusal("10.0.0.9", 1.0)
        else:
            throttle.failed("10.0.0.9", f"the API token is not known ({i})")
        clock.now += 0.02
    # 44 s: 3 checked at once, then one every 20 s (2 more); the other 2,209 answered 429 unchecked
    assert lines.lines == ["refused a personal token from 10.0.0.9: the API token is not known (0) "
                           "(more from it are counted: one line per 60 s)"]
    assert throttle.flush() == []                   # the window is not over yet
    clock.now = 1000.0 + 60.0
    [line] = throttle.flush()
    assert line.startswith("refused 2,213 bad tokens from 10.0.0.9 in the last 60 s, 2,209 of them with 429 "
                           "unchecked; last: the API token is not known (")
    assert lines.lines[-1] == line
    clock.now += 60.0
    assert throttle.flush() == [] and len(lines.lines) == 2     # a quiet window: nothing, and it is forgotten
    throttle.failed("10.0.0.9", "again")
    assert lines.lines[-1].startswith("refused a personal token from 10.0.0.9: again")


@pytest.mark.parametrize("remote,source", [("10.0.0.9", "10.0.0.9"), ("::ffff:10.0.0.9", "10.0.0.9"),
                                           ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
                                           ("2001:db8:1:2:bbbb::7", "2001:db8:1:2::/64"), (None, "?")])
def test_sources_are_addresses_and_an_ipv6_64_is_one_source(remote, source):
    assert source_of(remote) == source


def test_settings_that_cannot_throttle_are_refused_with_what_to_set(tmp_path):
    with pytest.raises(UserError, match="cannot throttle") as refused:
        AuthThrottle.from_config(preset_for_tests(tmp_path, api_auth_failures=0))
    assert "api_auth_failures" in refused.value.hint
    assert AuthThrottle.from_config(preset_for_tests(tmp_path)).failures == 20


def test_the_limiter_says_how_long_to_wait_without_counting():
    clock = Clock()
    limiter = RateLimiter(rate=1.0, burst=2, clock=clock)
    assert limiter.waiting("a") == 0 and len(limiter) == 0      # an unknown address: tracked only once it fails
    limiter.take("a")
    limiter.take("a")
    assert limiter.waiting("a") == pytest.approx(1.0) == limiter.waiting("a")
    clock.now += 0.5
    assert limiter.waiting("a") == pytest.approx(0.5)
