"""The per-job supervisor (``python -m floydd.agent WORKSPACE``) and the tiny in-job SDK.

The agent is a separate, detached process per job: it outlives daemon restarts, runs
the job (in bubblewrap where available), captures its output into ``job.log`` and
reports through ``status.json``. Modules:

    spec        AgentSpec: what the daemon asks the agent to run (spec.json)
    status      Status: what the agent reports (status.json, rewritten atomically)
    stop        what the daemon asks when it ends a job: outcome and reason (the stop file)
    sandbox     the bubblewrap command line and the job's environment
    allowlist   what of the host a sandbox shows (system folders, a minimal /etc, the Python)
    jobenv      the job's environment: an allow-list, never the daemon's
    capture     stdout/stderr pipes -> job.log lines ``<ts> <o|e> <text>``
    supervisor  the main loop: spawn, capture, max-runtime, stop, final status
    sdk         ``log(name, value, step)`` for use inside jobs (imports nothing heavy)

Importing this package imports nothing: jobs import :mod:`floydd.agent.sdk`.
"""
