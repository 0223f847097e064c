"""Data mounts: where a job's datasets appear (``--data NAME[:VERSION]:MOUNT``), as asked
(:class:`MountRequest`) and as resolved to exact versions (:class:`Mount`), and the mount
points refused (the system's folders and the job's own)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from floydd.errors import InvalidSpec, UnsafePath
from floydd.model.names import DatasetRef, check_abs_path

__all__ = ["WORKSPACE_NAMES", "check_mount_target", "MountRequest", "Mount", "parse_data", "MAX_MOUNTS",
           "check_mounts"]

WORKSPACE_NAMES = frozenset({"code", "output", "home", "tmp", "job.log", "status.json", "agent.log",
                             "spec.json", "stop", "env.log"})
"""Names at the top of a job's workspace that belong to floydd, not to data mounts."""
_SYSTEM_DIRS = ("/proc", "/dev", "/sys", "/usr", "/bin", "/sbin", "/lib", "/etc", "/tmp", "/home",
                "/root", "/run", "/var", "/boot", "/opt", "/srv", "/mnt", "/media", "/snap")
_JOB_DIRS = ("/code", "/output")
_MOUNT_HINT = "mount data at a fresh absolute path such as /input or /data"


def check_mount_target(target: object) -> str:
    """Where a dataset appears in the job, returned unchanged if allowed: absolute,
    normalized, and leaving the system and the job's own folders alone (``/input``,
    ``/input/x``, ``/data`` are fine; ``/``, ``/code``, ``/output``, anything under ``/etc``,
    ``/usr``, ``/tmp``, ``/home``, ... is not)."""
    check_abs_path(target, "mount point", hint=_MOUNT_HINT)
    if posixpath.normpath(target) != target or "//" in target:
        raise UnsafePath(f"mount point {target!r:.80} is not normalized", hint=_MOUNT_HINT)
    if target == "/":
        raise UnsafePath("data cannot be mounted over /", hint=_MOUNT_HINT)
    for top in _SYSTEM_DIRS + _JOB_DIRS:
        if target == top or target.startswith(top + "/"):
            raise UnsafePath(f"mount point {target:.80} is inside {top}, which the job needs as it is",
                             hint=_MOUNT_HINT)
    head = target[1:].split("/")[0]
    if head.startswith(("lib", "job.log.")) or head in WORKSPACE_NAMES:    # job.log.K: an earlier attempt's
        raise UnsafePath(f"mount point {target:.80} is reserved", hint=_MOUNT_HINT)
    return target


@dataclass(frozen=True, slots=True, kw_only=True)
class MountRequest:
    """What a user asks for: dataset ``ref`` (any version form) at ``mount``."""

    ref: str
    mount: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A resolved mount: the exact version ``ref`` (``NAME:N``), its ``tree``, where it appears."""

    ref: str
    tree: str
    mount: str

    def to_dict(self) -> dict[str, str]:
        return {"ref": self.ref, "tree": self.tree, "mount": self.mount}


def parse_data(text: object) -> MountRequest:
    """``NAME[:VER]:MOUNT`` or ``PROJECT/N/output[:VER]:MOUNT`` (``--data``)."""
    if not isinstance(text, str) or ":" not in text:
        raise InvalidSpec(f"--data {text!r:.80} is malformed",
                          hint="write NAME[:VERSION]:MOUNT, e.g. --data mnist:/input or --data mnist:2:/input")
    ref, _, mount = text.rpartition(":")
    if not ref or not mount.startswith("/"):
        raise InvalidSpec(f"--data {text!r:.80} is malformed: the mount point must be an absolute path",
                          hint="write NAME[:VERSION]:MOUNT, e.g. --data mnist:/input")
    return MountRequest(ref=ref, mount=mount)


MAX_MOUNTS = 64
"""The most datasets one job may mount."""


def check_mounts(items: object) -> list[MountRequest]:
    """``--data`` items (``NAME[:VER]:MOUNT`` strings or ``{"ref", "mount"}``) with their refs
    parsed and mount points normalized and checked, none twice (/etc, /proc, /code... are
    refused at submission, not at start)."""
    if not isinstance(items, (list, tuple)):
        raise InvalidSpec("data must be a list of NAME[:VERSION]:MOUNT", hint="use --data mnist:/input")
    if len(items) > MAX_MOUNTS:
        raise InvalidSpec(f"{len(items)} --data mounts; a job mounts at most {MAX_MOUNTS}",
                          hint="put the data in fewer datasets, or mount a folder holding them all")
    mounts: list[MountRequest] = []
    seen: set[str] = set()
    for item in items:
        if isinstance(item, str):
            item = parse_data(item)
        elif isinstance(item, dict) and isinstance(item.get("ref"), str) and isinstance(item.get("mount"), str):
            item = MountRequest(ref=item["ref"], mount=item["mount"])
        elif not isinstance(item, MountRequest):
            raise InvalidSpec(f"data mount {item!r:.80} is malformed", hint="write NAME[:VERSION]:MOUNT")
        DatasetRef.parse(item.ref)
        mount = check_mount_target(posixpath.normpath(item.mount))
        if mount in seen:
            raise InvalidSpec(f"two --data mounts at {mount}", hint="give each dataset its own mount point")
        seen.add(mount)
        mounts.append(MountRequest(ref=item.ref, mount=mount))
    return mounts
