"""A replicated job in the shape of a local job record: what the API and CLI show of it."""

from __future__ import annotations

from floydd.cluster.state.commands import copy_of
from floydd.model import SPEC_FIELDS, Job

__all__ = ["job_view"]


def job_view(job: Job, node_names: dict[str, str]) -> dict:
    """A replicated job in the shape of a local job record (what the API and CLI show); its
    nested values are copies (the job's stored spec and summary are the state's own)."""
    spec, metrics, imported = copy_of(({name: job.stored_spec.get(name) for name in SPEC_FIELDS},
                                       job.summary.get("metrics") or {}, job.extra.get("imported")))
    return {**spec, "data": spec["data"] or [],
            "id": job.id, "project": job.project, "number": job.number, "state": job.state, "reason": job.reason,
            "waiting_for": job.waiting_for, "created": job.created, "started": job.started, "ended": job.ended,
            "gpus": list(job.gpu_ids), "exit_code": job.exit_code, "output_version": job.output_version,
            "attempts": job.attempts, "stop_requested": job.stop_requested, "user": job.user, "origin": job.origin,
            "endpoint": job.endpoint, "unknown_since": job.unknown_since, "imported": imported,
            "node": node_names.get(job.node, job.node or ""), "node_id": job.node, "metrics": metrics,
            "workspace": "", "agent_pid": None, "latest": None, "attempt": job.attempts, "reruns": job.reruns,
            "archived": job.extra.get("archived_at") is not None,
            "parts": [{"rank": p.rank, "node": node_names.get(p.node, p.node), "gpus": list(p.gpu_ids),
                       "state": p.state, "exit_code": p.exit_code, "reason": p.reason, "node_id": p.node}
                      for p in job.parts],
            "history": False}
