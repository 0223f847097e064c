"""Whether this box's jobs run sandboxed, what happens when they cannot, and who is told.

The ``sandbox`` setting and the box decide the policy::

    sandbox = require | bwrap     require   bubblewrap, or no job: ``floyd run`` is refused here,
                                            a job placed here from another box fails at start
    sandbox = prefer              prefer    bubblewrap when it works, else jobs run unsandboxed
    sandbox = none                off       never sandboxed (tests, debugging)
    sandbox = auto (default)      require when the daemon serves more than its own user
                                  (:func:`serves_others`), prefer otherwise

bwrap is probed once per daemon, by starting the same kind of sandbox a job gets
(:func:`floydd.agent.sandbox.probe_bwrap`). Whenever jobs here would run without one, it is
said loudly, in one sentence (:attr:`Sandboxing.warning`): a warning in the daemon's log at
start-up, one line on stderr for every ``floyd run`` (the submit answer's ``warnings``),
``floyd info`` and ``floydd status``, and in the log of every job that runs unsandboxed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Callable

from floydd.errors import Conflict

__all__ = ["Sandboxing", "policy_for", "serves_others", "resolve"]

POLICIES = ("require", "prefer", "off")


@dataclass(frozen=True, slots=True, kw_only=True)
class Sandboxing:
    """This box's sandbox, as resolved once at start."""

    policy: str
    """``require``, ``prefer`` or ``off`` (:func:`policy_for`)."""
    bwrap: str | None
    """The bubblewrap binary jobs run under; None: jobs here get no sandbox."""
    why: str = ""
    """Why there is no sandbox (bwrap missing, failing its probe, or switched off)."""

    @property
    def mode(self) -> str:
        """What the agent is asked for: ``bwrap`` or ``none``."""
        return "bwrap" if self.bwrap else "none"

    @property
    def refuses(self) -> bool:
        """Jobs cannot run here: the sandbox is required and there is none."""
        return self.policy == "require" and self.bwrap is None

    @property
    def warning(self) -> str | None:
        """One sentence when jobs here are not sandboxed (None when they are)."""
        if self.bwrap:
            return None
        if self.refuses:
            return (f"this box runs no jobs: sandbox = \"require\" and {self.why}; install bubblewrap "
                    "(apt install bubblewrap), or set sandbox = \"prefer\" in floydd.toml")
        return (f"jobs on this box run WITHOUT a sandbox ({self.why}): a job can read whatever the daemon's "
                "user can (the store secret, other jobs' workspaces) and use its socket; install bubblewrap "
                "(apt install bubblewrap), or set sandbox = \"require\" to refuse such jobs")

    def check(self) -> None:
        """Raise when jobs cannot run here (at submit, and again before a job starts)."""
        if self.refuses:
            raise Conflict(f"this box requires a sandbox for jobs and has none: {self.why}",
                           hint="install bubblewrap (apt install bubblewrap), or set sandbox = \"prefer\" in "
                                "floydd.toml to run jobs unsandboxed", code="sandbox_required")


def policy_for(setting: str, others: bool) -> str:
    """The policy for the ``sandbox`` setting on a daemon that serves others (or not)."""
    if setting in ("require", "bwrap"):
        return "require"
    if setting == "prefer":
        return "prefer"
    if setting == "none":
        return "off"
    return "require" if others else "prefer"


def serves_others(config) -> bool:
    """THE rule for "this daemon serves more than its own user": the config says so
    (``system = true``: a service install), or its API socket, or the socket's folder,
    lets its group or others in. A user daemon (README's first command) has an owner-only
    socket in an owner-only folder and serves only its user."""
    if getattr(config, "system", False):
        return True
    sock = config.socket_path
    for path in (sock, sock.parent):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if stat.S_IMODE(mode) & 0o077:
            return True
    return False


def resolve(setting: str, others: bool, probe: Callable[[], tuple[str | None, str]]) -> Sandboxing:
    """This box's sandbox: the policy, and bwrap when the policy wants it and ``probe``
    (:func:`floydd.agent.sandbox.probe_bwrap`) finds it working."""
    policy = policy_for(setting, others)
    if policy == "off":
        return Sandboxing(policy=policy, bwrap=None, why="sandbox = \"none\" in the config")
    path, why = probe()
    return Sandboxing(policy=policy, bwrap=path, why="" if path else why)
