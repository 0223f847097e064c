"""``spec.json``: what the daemon asks an agent to run, as one frozen value.

The daemon writes it (through :meth:`AgentSpec.to_json`) into the job's workspace
before starting the agent; the agent reads it back with :meth:`AgentSpec.from_json`.
Bind mount sources are relative to the workspace, targets are the paths the job sees.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from floydd.errors import InvalidSpec, UnsafePath
from floydd.model import DEFAULT_STOP_GRACE, WORKSPACE_NAMES, check_mount_target

__all__ = ["AgentSpec", "BindMount", "SANDBOX_MODES"]

SANDBOX_MODES = ("auto", "bwrap", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class BindMount:
    """A workspace folder (``source``, relative) bound read-only at ``target`` in the job (what a
    dataset mount, :class:`floydd.model.Mount`, becomes once its tree is in the workspace)."""

    source: str
    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """One job as the agent runs it; see ``spec.json`` in the module docstring."""

    job: str
    command: str
    env: dict[str, str] = field(default_factory=dict)
    gpu_ids: tuple[int, ...] = ()
    """The GPUs the job's placement gave it here (their indices): its ``CUDA_VISIBLE_DEVICES``."""
    max_runtime: float | None = None
    python_bin: str | None = None
    mounts: tuple[BindMount, ...] = ()
    sandbox: str = "auto"
    stop_grace: float = DEFAULT_STOP_GRACE
    state_dir: str | None = None
    """The folder holding every workspace (and the store, records): hidden from the job."""
    uid: int | None = None
    gid: int | None = None
    """System mode: the job user the job runs as (:mod:`floydd.agent.jobuser`); None: as the agent."""
    max_log_bytes: int | None = None
    """The cap of ``job.log`` (``max_log_mb``; :mod:`floydd.agent.capture`); None: no cap."""

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise InvalidSpec("the job's command is empty", hint='give a command, e.g. "python train.py"')
        if self.sandbox not in SANDBOX_MODES:
            raise InvalidSpec(f"sandbox {self.sandbox!r} is unknown", hint=f"use one of {', '.join(SANDBOX_MODES)}")
        for key, value in self.env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key or not isinstance(value, str):
                raise InvalidSpec(f"environment variable {key!r} is malformed", hint="use KEY=VALUE strings")
        if self.max_runtime is not None and not self.max_runtime > 0:
            raise InvalidSpec(f"max_runtime {self.max_runtime!r} must be positive", hint="e.g. 3600")
        if not self.stop_grace >= 0:
            raise InvalidSpec(f"stop_grace {self.stop_grace!r} must be ≥ 0", hint="e.g. 10")
        if self.max_log_bytes is not None and (isinstance(self.max_log_bytes, bool) or self.max_log_bytes < 1):
            raise InvalidSpec(f"max_log_bytes {self.max_log_bytes!r} must be a positive number of bytes",
                              hint="set max_log_mb to more than 0 (or 0: no cap)")
        if (self.uid is None) != (self.gid is None) or (self.uid is not None and (self.uid <= 0 or self.gid <= 0)):
            raise InvalidSpec(f"job user {self.uid}:{self.gid} is not an unprivileged uid and gid",
                              hint="set job_user to an unprivileged account (not root)")
        for mount in self.mounts:
            check_mount_target(mount.target)
            src = mount.source
            if posixpath.isabs(src) or posixpath.normpath(src) != src or src.split("/")[0] in ("..", ".") \
                    or src.split("/")[0] in WORKSPACE_NAMES:
                raise UnsafePath(f"mount source {src!r} must be a plain folder inside the workspace",
                                 hint="the daemon writes sources like 'input' for /input")

    def to_json(self) -> str:
        return json.dumps({
            "job": self.job, "command": self.command, "env": dict(self.env), "gpus": [str(g) for g in self.gpu_ids],
            "max_runtime": self.max_runtime, "python_bin": self.python_bin,
            "mounts": [{"source": m.source, "target": m.target} for m in self.mounts],
            "sandbox": self.sandbox, "stop_grace": self.stop_grace, "state_dir": self.state_dir,
            "uid": self.uid, "gid": self.gid, "max_log_bytes": self.max_log_bytes,
        }, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentSpec:
        try:
            raw: Any = json.loads(text)
        except ValueError as exc:
            raise InvalidSpec(f"spec.json is not JSON: {exc}", hint="the daemon writes it; was it edited?") from None
        if not isinstance(raw, dict):
            raise InvalidSpec("spec.json must hold a JSON object", hint="the daemon writes it; was it edited?")
        try:
            return cls(
                job=str(raw["job"]), command=raw["command"], env=dict(raw.get("env") or {}),
                gpu_ids=tuple(int(g) for g in raw.get("gpus") or ()),
                max_runtime=None if raw.get("max_runtime") is None else float(raw["max_runtime"]),
                python_bin=raw.get("python_bin") or None,
                mounts=tuple(BindMount(source=str(m["source"]), target=str(m["target"]))
                             for m in raw.get("mounts") or ()),
                sandbox=raw.get("sandbox", "auto"), stop_grace=float(raw.get("stop_grace", DEFAULT_STOP_GRACE)),
                state_dir=raw.get("state_dir") or None,
                uid=None if raw.get("uid") is None else int(raw["uid"]),
                gid=None if raw.get("gid") is None else int(raw["gid"]),
                max_log_bytes=None if raw.get("max_log_bytes") is None else int(raw["max_log_bytes"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidSpec(f"spec.json is malformed: {exc!r}", hint="the daemon writes it; was it edited?") from None
