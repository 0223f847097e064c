"""The multi-host network's own tests use its fixture."""

from tests.harness.netns import netns  # noqa: F401
