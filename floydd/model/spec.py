"""The spec a job runs with, fixed at submission (code snapshotted, data versions pinned),
and its stored form: what the replicated state keeps of it, and a box's records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from floydd.model.defaults import DEFAULT_ENV, DEFAULT_MODE
from floydd.model.mounts import Mount
from floydd.model.resources import Resources
from floydd.model.restart import RestartPolicy

__all__ = ["JobSpec", "SPEC_FIELDS", "RECORD_FIELDS"]

SPEC_FIELDS = ("command", "params", "code_tree", "data", "resources", "env", "message", "mode", "max_runtime",
               "restart")
"""What a job's spec holds in the replicated state; the rest is its state."""
RECORD_FIELDS = SPEC_FIELDS[:-1]
"""What a box's record of a run keeps of its spec (the restart policy is the cluster's business)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What a job runs with; fixed at submission (code snapshotted, data versions pinned)."""

    command: str
    code_tree: str
    params: dict[str, str] = field(default_factory=dict)
    data: tuple[Mount, ...] = ()
    resources: Resources = Resources()
    env: str = DEFAULT_ENV
    message: str = ""
    mode: str = DEFAULT_MODE
    max_runtime: float | None = None
    restart: RestartPolicy = RestartPolicy()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> JobSpec:
        """From the stored form (replicated state, records); unknown keys are ignored, and a
        spec stored before restart policies (or a record, which keeps none) gets the default."""
        return cls(command=raw["command"], code_tree=raw["code_tree"], params=dict(raw.get("params") or {}),
                   data=tuple(Mount(ref=m["ref"], tree=m["tree"], mount=m["mount"]) for m in raw.get("data") or ()),
                   resources=Resources.from_dict(raw.get("resources")), env=raw.get("env") or DEFAULT_ENV,
                   message=raw.get("message") or "", mode=raw.get("mode") or DEFAULT_MODE,
                   max_runtime=raw.get("max_runtime"),
                   restart=RestartPolicy.from_dict(raw.get("restart")))

    def to_dict(self) -> dict[str, Any]:
        """The stored form: plain data with exactly :data:`SPEC_FIELDS`."""
        return {"command": self.command, "params": dict(self.params), "code_tree": self.code_tree,
                "data": [m.to_dict() for m in self.data], "resources": self.resources.to_dict(),
                "env": self.env, "message": self.message, "mode": self.mode, "max_runtime": self.max_runtime,
                "restart": self.restart.to_dict()}
