"""``spec.json``: what the daemon asks an agent to run, as one frozen value.

The daemon writes it (through :meth:`AgentSpec.to_json`) into the job's workspace
before starting the agent; the agent reads it back with :meth:`AgentSpec.from_json`.
Mount sources are relative to the workspace, targets are the paths the job sees.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from floydd.errors import InvalidSpec, UnsafePath

__all__ = ["AgentSpec", "Mount", "SANDBOX_MODES", "check_mount_target", "RESERVED_NAMES"]

SANDBOX_MODES = ("auto", "bwrap", "none")

RESERVED_NAMES = frozenset({"code", "output", "home", "tmp", "job.log", "status.json", "agent.log",
                            "spec.json", "stop", "env.log"})
"""Names at the top of a workspace that belong to floydd, not to data mounts."""

_SYSTEM_DIRS = ("/proc", "/dev", "/sys", "/usr", "/bin", "/sbin", "/lib", "/etc", "/tmp", "/home",
                "/root", "/run", "/var", "/boot", "/opt", "/srv", "/mnt", "/media", "/snap")
_JOB_DIRS = ("/code", "/output")


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A workspace folder (``source``, relative) shown read-only at ``target`` in the job."""

    source: str
    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """One job as the agent runs it; see ``spec.json`` in the module docstring."""

    job: str
    command: str
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()
    max_runtime: float | None = None
    python_bin: str | None = None
    mounts: tuple[Mount, ...] = ()
    sandbox: str = "auto"
    stop_grace: float = 10.0
    state_dir: str | None = None
    """The folder holding every workspace (and the store, records): hidden from the job."""

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
        for mount in self.mounts:
            check_mount_target(mount.target)
            src = mount.source
            if posixpath.isabs(src) or posixpath.normpath(src) != src or src.split("/")[0] in ("..", ".") \
                    or src.split("/")[0] in RESERVED_NAMES:
                raise UnsafePath(f"mount source {src!r} must be a plain folder inside the workspace",
                                 hint="the daemon writes sources like 'input' for /input")

    def to_json(self) -> str:
        return json.dumps({
            "job": self.job, "command": self.command, "env": dict(self.env), "gpus": list(self.gpus),
            "max_runtime": self.max_runtime, "python_bin": self.python_bin,
            "mounts": [{"source": m.source, "target": m.target} for m in self.mounts],
            "sandbox": self.sandbox, "stop_grace": self.stop_grace, "state_dir": self.state_dir,
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
                gpus=tuple(str(g) for g in raw.get("gpus") or ()),
                max_runtime=None if raw.get("max_runtime") is None else float(raw["max_runtime"]),
                python_bin=raw.get("python_bin") or None,
                mounts=tuple(Mount(source=str(m["source"]), target=str(m["target"]))
                             for m in raw.get("mounts") or ()),
                sandbox=raw.get("sandbox", "auto"), stop_grace=float(raw.get("stop_grace", 10.0)),
                state_dir=raw.get("state_dir") or None)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidSpec(f"spec.json is malformed: {exc!r}", hint="the daemon writes it; was it edited?") from None


def check_mount_target(target: str) -> str:
    """Validate where a dataset appears in the job; return it unchanged.

    Targets are absolute, normalized, and leave the system and the job's own folders
    alone: ``/input``, ``/input/x``, ``/data`` are fine; ``/``, ``/code``, ``/output``,
    anything under ``/etc``, ``/usr``, ``/tmp``, ``/home``, ... is not.
    """
    hint = "mount data at a fresh absolute path such as /input or /data"
    if not isinstance(target, str) or not target.startswith("/") or "\0" in target:
        raise UnsafePath(f"mount point {target!r} must be an absolute path", hint=hint)
    if posixpath.normpath(target) != target or "//" in target:
        raise UnsafePath(f"mount point {target!r} is not normalized", hint=hint)
    if target == "/":
        raise UnsafePath("data cannot be mounted over /", hint=hint)
    for top in _SYSTEM_DIRS + _JOB_DIRS:
        if target == top or target.startswith(top + "/"):
            raise UnsafePath(f"mount point {target} is inside {top}, which the job needs as it is", hint=hint)
    head = target[1:].split("/")[0]
    if head.startswith("lib") or head in RESERVED_NAMES:
        raise UnsafePath(f"mount point {target} is reserved", hint=hint)
    return target
