"""Every default a job is given when nobody says otherwise, in one place: the restart policy
(``--restart``, ``--max-attempts``, ``--lost-after``), its environment and mode, how often its
``/output`` is checkpointed and how long a stop waits before it kills. The daemon's settings
(:class:`floydd.config.Config`) and the CLI's ``--help`` take their defaults from here, and so
do the keyword defaults of the parts that use them (tests build those parts without a
config)."""

from __future__ import annotations

__all__ = ["DEFAULT_RESTART", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_LOST_AFTER", "DEFAULT_ENV", "DEFAULT_MODE",
           "DEFAULT_CHECKPOINT_INTERVAL", "DEFAULT_STOP_GRACE"]

DEFAULT_RESTART = "on-lost"
"""``--restart``: a run lost with its box is run again, a run that failed is not."""
DEFAULT_MAX_ATTEMPTS = 3
"""``--max-attempts``: runs in all, the first included."""
DEFAULT_LOST_AFTER = 300.0
"""Seconds a job's box may be out of touch before the run is lost: the cluster's
``job_lost_after`` (docs/operations.md: 300, 5 minutes), which ``--lost-after`` overrides."""
DEFAULT_ENV = "default"
DEFAULT_MODE = "job"
DEFAULT_CHECKPOINT_INTERVAL = 60.0
"""Seconds between snapshots of a running job's ``/output`` (``checkpoint_interval``)."""
DEFAULT_STOP_GRACE = 10.0
"""Seconds a stopped job gets after SIGTERM before SIGKILL (``stop_grace``)."""
