"""Fixtures for tests that run real agents and the node runtime."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.harness.leftovers import watch


@pytest.fixture
def state_dir():
    """A state dir outside /tmp: the sandbox hides /tmp anyway, this must hide STATE itself."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    path = watch(tempfile.mkdtemp(prefix="floydd-test-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)
