"""``--restart``, ``--max-attempts``, ``--lost-after``: a job's restart policy on the command line
(``floyd run`` and ``floyd restart``), checked before anything is sent, and its words in
``floyd info``."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import click

from floydd.model import DEFAULT_MAX_ATTEMPTS, DEFAULT_RESTART, RESTART_POLICIES, RestartPolicy, parse_duration

if TYPE_CHECKING:
    from floydd.model import JobView

__all__ = ["restart_options", "describe_policy"]


def restart_options(fn: Callable) -> Callable:
    """Add the three options to a command; it gets them as ``policy``: the body fields given
    (``restart``, ``max_attempts``, ``lost_after`` in seconds), checked."""
    @click.option("--restart", "restart", type=click.Choice(RESTART_POLICIES), default=None,
                  help="When to run the job again (same job, a new attempt, starting from its last /output): "
                       "never, on-failure (failed or lost), on-lost (its box was lost; the default).")
    @click.option("--max-attempts", "max_attempts", type=int, default=None, metavar="N",
                  help=f"Run it at most N times in all (default {DEFAULT_MAX_ATTEMPTS}).")
    @click.option("--lost-after", "lost_after", default=None, metavar="DURATION",
                  help="How long its box may be out of touch (the job 'unknown') before the run counts as "
                       "lost, e.g. 90s, 10m, 2h (default: the cluster's job_lost_after).")
    @functools.wraps(fn)
    def wrapper(*args: Any, restart: str | None, max_attempts: int | None, lost_after: str | None,
                **kwargs: Any) -> Any:
        return fn(*args, policy=policy_fields(restart, max_attempts, lost_after), **kwargs)
    return wrapper


def policy_fields(restart: str | None, max_attempts: int | None, lost_after: str | None) -> dict[str, Any]:
    """The fields given, checked (``InvalidSpec`` with a hint otherwise)."""
    fields: dict[str, Any] = {}
    if restart is not None:
        fields["restart"] = restart
    if max_attempts is not None:
        fields["max_attempts"] = max_attempts
    if lost_after is not None:
        fields["lost_after"] = parse_duration(lost_after)
    RestartPolicy(**{name: fields[field] for name, field in _POLICY_FIELDS if field in fields})   # else its defaults
    return fields


_POLICY_FIELDS = (("policy", "restart"), ("max_attempts", "max_attempts"), ("lost_after", "lost_after"))
""":class:`RestartPolicy`'s fields and the body's names for them."""


def describe_policy(job: JobView) -> str:
    """``on-lost, run 2 of at most 3, lost after 5 min out of touch (the cluster's default)``."""
    asked = job.restart             # None: a job stored before restart policies, which has the default
    policy = RestartPolicy() if asked is None else RestartPolicy(
        policy=asked.policy or DEFAULT_RESTART, max_attempts=asked.max_attempts or DEFAULT_MAX_ATTEMPTS,
        lost_after=asked.lost_after)
    window = "the cluster's lost-after" if policy.lost_after is None else _duration(policy.lost_after)
    return f"{policy.policy}, run {job.reruns + 1} of at most {policy.max_attempts}, attempt {job.attempts}; " \
           f"lost after {window} out of touch"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
