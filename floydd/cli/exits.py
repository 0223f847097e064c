"""``floyd``'s exit codes: one table, shown by ``floyd --help`` and kept by the commands.

``floyd run -f`` (and ``floyd restart -f``) exit with the job's own code, as ``docker run``
does, so scripts can test a run as they test a local command; floyd's own outcomes take the
codes that ``timeout(1)`` and ``docker run`` made familiar (124, 125) and a shell's 128+N.
A job may exit with any of these codes itself: ``floyd info JOB`` tells them apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from floydd.model import JobView

__all__ = ["OK", "ERROR", "TIMEOUT", "NOT_FOLLOWED", "INTERRUPTED", "STOPPED", "LOST", "HELP", "of_job"]

OK = 0
ERROR = 1
"""floyd failed and said why on stderr (a bad argument, an error from the daemon, the daemon
went away); ``floyd data verify``: damaged objects were found."""
TIMEOUT = 124
"""The job ran past its ``--max-runtime`` (as ``timeout(1)``)."""
NOT_FOLLOWED = 125
"""``floyd run -f`` lost track of the job after submitting it (e.g. the daemon went away):
the job may still be running (as ``docker run``'s own failures)."""
INTERRUPTED = 130
"""Ctrl-C: floyd stopped; a job it was following keeps running."""
STOPPED = 143
"""The job was stopped (``floyd stop``), as a process ended by SIGTERM."""
LOST = 69
"""The box that ran the job went silent for longer than ``--lost-after``: its end is unknown
(``EX_UNAVAILABLE`` of sysexits.h)."""

HELP = f"""\b
Exit status:
  {OK:<5}done; floyd run -f: the job succeeded
  {ERROR:<5}floyd failed and said why on stderr (the daemon going away too),
       or floyd data verify found damaged objects
  2    a usage error (unknown option, missing argument)
  {INTERRUPTED:<5}interrupted (Ctrl-C); a job being followed keeps running
\b
floyd run -f and floyd restart -f exit with the job's own exit code:
  N    the job's command exited with N (1-255; 128+S: killed by signal S)
  {ERROR:<5}also: the job failed before its command ran (floyd info JOB says why)
  {LOST:<5}the job was lost: the box that ran it went silent
  {TIMEOUT:<5}the job ran past --max-runtime (as timeout(1))
  {NOT_FOLLOWED:<5}floyd lost track of the job after submitting it; it may still run
  {STOPPED:<5}the job was stopped (floyd stop), as by SIGTERM
"""
"""The exit codes as ``floyd --help`` shows them (click keeps ``\\b`` blocks as written)."""


def of_job(job: JobView) -> int:
    """The exit code of ``floyd run -f`` for ``job``, which has ended."""
    state = job.state
    if state == "success":
        return OK
    if state == "timeout":
        return TIMEOUT
    if state == "stopped":
        return STOPPED
    if state == "lost":
        return LOST
    code = job.exit_code
    if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 256:
        return code
    return ERROR                    # failed without an exit code of its own (or one a shell cannot give)
