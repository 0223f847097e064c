"""Fixtures shared by every test folder."""

from __future__ import annotations

import time
from typing import Callable

import pytest


def wait_until(cond: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
               what: str = "condition") -> object:
    """Poll ``cond`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
