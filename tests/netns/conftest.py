"""The multi-host network's own tests use its fixture."""

from tests.netns.fixture import netns  # noqa: F401
