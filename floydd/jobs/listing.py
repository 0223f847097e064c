"""A replicated job in the shape of a local job record: what the API and CLI show of it."""

from __future__ import annotations

from floydd.model import SPEC_FIELDS

__all__ = ["job_view"]

_JOB_FIELDS = ("id", "project", "number", "state", "reason", "waiting_for", "created", "started", "ended",
               "gpus", "exit_code", "output_version", "attempts", "stop_requested", "user", "origin", "endpoint",
               "unknown_since", "imported")


def job_view(job: dict, node_names: dict[str, str]) -> dict:
    """A replicated job in the shape of a local job record (what the API and CLI show)."""
    view = {name: job["spec"].get(name) for name in SPEC_FIELDS}
    view.update({name: job.get(name) for name in _JOB_FIELDS})
    view.update(node=node_names.get(job["node"], job["node"] or ""), node_id=job["node"],
                metrics=dict(job["summary"].get("metrics") or {}), workspace="", agent_pid=None,
                latest=None, attempt=job["attempts"], reruns=job.get("reruns") or 0,
                archived=job.get("archived_at") is not None,
                parts=[{**part, "node": node_names.get(part["node"], part["node"]), "node_id": part["node"]}
                       for part in job.get("parts") or ()], history=False)
    view["data"] = view["data"] or []
    return view
