"""On this node: job workspaces, agent spawn and re-adoption, log and metric tailing.

    runner     NodeRuntime: the job lifecycle as idempotent steps (state diagram there)
    watch      JobWatch: one running job's log, samples and end, into the records
    workspace  STATE/jobs/<project>/<n>/: folders, code and data restored from the store
    envs       the job's Python: the daemon's, or a cached venv for floyd_requirements.txt
    buildbox   the sandbox such a venv's pip install runs in (the project's code runs there)
    sandboxing whether jobs here are sandboxed, the policy when they cannot be, the warning
    spawn      start the detached agent, recognise it later (pid + start time), stop it
    tail       job.log from an offset: log lines and metric points (or skipped, counted)
    outputs    what of /output a snapshot can hold; the rest is named and skipped
    disk       the state folder's disk: when it is full, and a reserve to record with

The agent itself (the per-job supervisor) is :mod:`floydd.agent`.
"""

from floydd.runtime.runner import NodeRuntime

__all__ = ["NodeRuntime"]
