"""GPU fencing on this box: a GPU takes a new placement only once every process of an older
one is gone (DESIGN §5b; the node is the final authority over its GPUs).

The runtime tags every job process it starts (through the agent's environment, which every
child inherits): ``FLOYD_BOX`` (this state folder's tag: several daemons may share a
machine, as in tests), ``FLOYD_JOB`` and ``FLOYD_ATTEMPT``; ``CUDA_VISIBLE_DEVICES`` names
its GPUs. :func:`live_runs` finds them all by scanning ``/proc``, whether or not an agent
still watches them (an agent killed, a daemon down, a worker that left the job's process
group), and is used three ways::

    heartbeats (node.health procs)   the leader places nothing on a GPU of a run the cluster
                                     gave up or replaced until the box says it is gone
    the reconciler, before a start   a GPU used by any other run (job, attempt) is taken
    the reconciler's sweep           a run the runtime does not hold is a leftover (its
                                     agent is gone, or it outlived its stop): killed

The scan reads the environment a process started with; a job that rewrites its own
``CUDA_VISIBLE_DEVICES`` for a child still names its GPUs in the parent's. Processes of
other users that this daemon cannot read, and GPU processes that are not floydd jobs, are
not seen.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

from floydd import log
from floydd.node import job_processes

__all__ = ["box_tag", "placement_env", "scan", "live_runs", "taken", "kill"]


def box_tag(state_dir: Path) -> str:
    """What ``FLOYD_BOX`` says for the jobs of the daemon owning ``state_dir``."""
    return hashlib.sha256(os.fsencode(Path(state_dir).absolute())).hexdigest()[:16]


def placement_env(state_dir: Path, attempt: int) -> dict[str, str]:
    """The variables that mark a run's processes as this box's ``attempt`` of its job."""
    return {"FLOYD_BOX": box_tag(state_dir), "FLOYD_ATTEMPT": str(int(attempt))}


def scan(state_dir: Path) -> dict[tuple[str, int], dict]:
    """``(job, attempt) -> {"gpus", "pids"}`` of this box's live runs (blocking: a thread)."""
    return job_processes(box_tag(state_dir))


def live_runs(state_dir: Path) -> list[dict]:
    """This box's live runs as heartbeats carry them: ``[{job, attempt, gpus}]`` (blocking)."""
    return [{"job": job, "attempt": attempt, "gpus": sorted(run["gpus"])}
            for (job, attempt), run in sorted(scan(state_dir).items())]


def taken(runs: dict[tuple[str, int], dict], job: str, attempt: int, gpus) -> list[str]:
    """The runs other than ``job``'s ``attempt`` whose processes use one of ``gpus``."""
    wanted = set(gpus)
    return sorted(f"{j} (attempt {a})" for (j, a), run in runs.items()
                  if (j, a) != (job, attempt) and run["gpus"] & wanted)


def kill(runs: dict[tuple[str, int], dict]) -> int:
    """SIGKILL every process of ``runs``; how many were signalled (blocking)."""
    killed = 0
    for (job, attempt), run in runs.items():
        for pid in run["pids"]:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                continue
        log.runtime.warning("killed %d leftover processes of %s (attempt %d): no run here holds them",
                            len(run["pids"]), job, attempt)
    return killed
