"""The job model: the plain typed values every layer shares, and their parsers.

One home for what a job *is*, so the CLI, the API, the replicated state, the records and
the runtime agree without validating twice: job keys, job states and the moves between
them, the spec a job runs with (command, code, data mounts, resources, params), dataset
names and references, and the parsers of ``--data``, ``--param`` and names. It imports
nothing of ours but :mod:`floydd.errors` (and nothing heavy at all: the agent and the CLI
load it too). Values are frozen dataclasses; the API decodes request bodies into them with
msgspec, which also draws their JSON schemas for ``/v1/openapi.json``.

Job states (``TRANSITIONS``; the replicated state adds the backward edges of :data:`REQUEUE`,
for a job whose box went silent before it started and for a run its restart policy reruns)::

    queued ──place──► starting ──► running ──► success | failed | stopped | timeout | lost
      ▲  │               │  │        │  ▲
      │  │               │  │        ▼  │ (its box is back: the run went on)
      │  │               │  └──► unknown ──► success | failed | stopped | timeout | lost
      │  └───────────────┴──► stopped | failed | lost        (never started)
      └── requeue (not started yet) / rerun (restart policy: failed or lost, attempts left) ──┘

``unknown`` (DESIGN §5b "Outages are not failures"): the box running the job is out of touch;
the job may well run on. It is a cluster state only: a box's own records never hold it. The
box coming back reports what became of the run; a box silent past the job's ``lost_after``
window makes it ``lost``. A rerun is the same job (same number) with a new attempt, and starts
from the last attempt's ``/output`` (:class:`RestartPolicy`).

Final states are final: the state machine turns a failed or lost run its policy reruns into
``queued`` instead of ending the job; a job that ended is run again as a new job (``floyd
restart``), never revived.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

from floydd.errors import Conflict, InvalidName, InvalidSpec, UnsafePath

__all__ = [
    "STATES", "FINAL_STATES", "ACTIVE_STATES", "TRANSITIONS", "REQUEUE", "check_state", "check_transition",
    "PROJECT_PATTERN", "DATASET_PATTERN", "check_project", "check_dataset_name", "check_upload_name",
    "MAX_PATH", "check_abs_path",
    "JobKey", "parse_job_key", "DatasetRef", "parse_ref",
    "MountRequest", "Mount", "parse_data", "check_mounts", "check_mount_target", "WORKSPACE_NAMES",
    "parse_param", "check_params", "Resources", "JobSpec", "Submission", "SPEC_FIELDS", "ENVIRONMENTS",
    "check_cpus", "asked_per_box", "known_count", "parse_size", "format_size", "format_cpus", "describe_needs",
    "MAX_CPUS", "MAX_MEMORY",
    "MAX_NODES", "MAX_GPUS", "MAX_COMMAND", "MAX_MESSAGE", "MAX_PARAMS", "MAX_PARAM_VALUE", "MAX_MOUNTS", "Restart",
    "MAX_RUNTIME", "check_max_runtime", "RECORD_FIELDS", "RestartPolicy", "RESTART_POLICIES",
    "DEFAULT_MAX_ATTEMPTS", "MAX_ATTEMPTS", "parse_duration",
]

# -- states ------------------------------------------------------------------------------------

STATES = ("queued", "starting", "running", "unknown", "success", "failed", "stopped", "timeout", "lost")
FINAL_STATES = frozenset({"success", "failed", "stopped", "timeout", "lost"})
ACTIVE_STATES = frozenset({"starting", "running", "unknown"})
"""Placed and not over: the job holds its GPUs (an ``unknown`` run may still use them)."""
TRANSITIONS: Mapping[str, frozenset[str]] = {
    "queued": frozenset({"starting", "stopped", "failed", "lost"}),
    "starting": frozenset({"running", "unknown", "stopped", "failed", "lost"}),
    "running": frozenset({"unknown", "success", "failed", "stopped", "timeout", "lost"}),
    "unknown": frozenset({"running", "success", "failed", "stopped", "timeout", "lost"}),
    **{state: frozenset() for state in FINAL_STATES},
}
REQUEUE = frozenset({("starting", "queued"), ("running", "queued"), ("unknown", "queued")})
"""The backward moves, made only by the replicated state: the box a job was placed on went
silent before the job started (the leader requeues it), or the restart policy reruns a
failed or lost run; either way the job waits to be placed again, as a new attempt."""


def check_state(state: object) -> str:
    if state not in TRANSITIONS:
        raise InvalidSpec(f"{state!r} is not a job state", hint=f"job states are: {', '.join(STATES)}")
    return state  # type: ignore[return-value]


def check_transition(key: str, old: str, new: str, *, requeue: bool = False) -> None:
    """``Conflict`` unless a job may move from ``old`` to ``new`` (``requeue``: the leader's
    :data:`REQUEUE` is allowed too)."""
    check_state(new)
    if new in TRANSITIONS[old] or (requeue and (old, new) in REQUEUE):
        return
    if old in FINAL_STATES:
        hint = "a job that ended stays ended; run it again as a new job (floyd restart)"
    else:
        hint = f"from {old} a job can become: {', '.join(s for s in STATES if s in TRANSITIONS[old])}"
    raise Conflict(f"job {key} is {old}; it cannot become {new}", hint=hint, code="bad_transition")


# -- names -------------------------------------------------------------------------------------

PROJECT_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"
_PROJECT = re.compile(PROJECT_PATTERN)
_PROJECT_HINT = "use 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit"
_DATASET = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_OUTPUT = re.compile(rf"({PROJECT_PATTERN})/([1-9][0-9]{{0,17}})/output")
DATASET_PATTERN = rf"{_DATASET.pattern}|{_OUTPUT.pattern}"
"""A dataset name, or ``PROJECT/N/output``: the output of job N of PROJECT."""
_DATASET_HINT = ("use lowercase letters, digits, '.', '_' and '-' (64 at most, starting with a letter or digit), "
                 "or PROJECT/N/output for a job's output")


def check_project(name: object) -> str:
    if not isinstance(name, str) or not _PROJECT.fullmatch(name):
        raise InvalidName(f"{name!r:.80} is not a valid project name", hint=_PROJECT_HINT)
    return name


def check_dataset_name(name: object) -> str:
    if isinstance(name, str) and (_DATASET.fullmatch(name) or _OUTPUT.fullmatch(name)) and ".." not in name:
        return name
    raise InvalidName(f"{name!r:.80} is not a valid dataset name", hint=_DATASET_HINT)


def check_upload_name(name: object) -> str:
    """A name an upload may take: a dataset name, but not ``PROJECT/N/output``, which is job
    N's output (a version under it would be mounted as that job's output). Only the runtime
    publishes versions under such names."""
    check_dataset_name(name)
    output = _OUTPUT.fullmatch(name)  # type: ignore[arg-type]
    if output:
        project, number = output.groups()
        raise InvalidName(f"{name} is the name of the output of job {project}/{number}; an upload cannot take it",
                          hint=f"choose a plain name, e.g. --name {project}-{number}-output")
    return name  # type: ignore[return-value]


MAX_PATH = 4096
"""The longest path (bytes, as the kernel's PATH_MAX) a request may name; a name in it at most 255."""


def check_abs_path(path: object, what: str, *, hint: str) -> str:
    """``path`` unchanged if it is an absolute path the kernel can take: no NUL, at most
    :data:`MAX_PATH` bytes, each name at most 255 (it need not exist)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise UnsafePath(f"{what} must be an absolute path", hint=hint)
    if "\0" in path:
        raise UnsafePath(f"{what} {path[:80]!r} holds a NUL byte", hint=hint)
    encoded = path.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_PATH or any(len(name) > 255 for name in encoded.split(b"/")):
        raise UnsafePath(f"{what} {path[:80]!r}... is too long: paths are at most {MAX_PATH} bytes, "
                         "each name in them at most 255", hint=hint)
    return path


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    """``mnist/12``: job 12 of project mnist. Unpacks as ``project, number = key``."""

    project: str
    number: int

    @classmethod
    def parse(cls, text: object) -> JobKey:
        project, sep, number = str(text).rpartition("/")
        if not sep or not _PROJECT.fullmatch(project) or not number.isascii() or not number.isdigit() \
                or number.startswith("0") or len(number) > 18:
            raise InvalidSpec(f"{text!r:.80} is not a job name",
                              hint="jobs are named PROJECT/NUMBER, e.g. digits/3 (see `floyd status`)")
        return cls(project, int(number))

    def __iter__(self) -> Iterator[Any]:
        yield self.project
        yield self.number

    def __str__(self) -> str:
        return f"{self.project}/{self.number}"

    @property
    def output_name(self) -> str:
        """The dataset its ``/output`` becomes."""
        return f"{self.project}/{self.number}/output"


def parse_job_key(text: object) -> JobKey:
    """``"digits/3"`` -> ``JobKey("digits", 3)`` (unpacks as ``("digits", 3)``)."""
    return JobKey.parse(text)


@dataclass(frozen=True, slots=True)
class DatasetRef:
    """``NAME`` or ``NAME:latest`` (version None: the latest), or ``NAME:N``."""

    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: object) -> DatasetRef:
        if not isinstance(text, str):
            raise InvalidName(f"{text!r:.80} is not a dataset reference", hint="write NAME, NAME:N or NAME:latest")
        name, sep, number = text.partition(":")
        check_dataset_name(name)
        if not sep or number == "latest":
            return cls(name)
        if not number.isascii() or not number.isdigit() or number.startswith("0") or len(number) > 18:
            raise InvalidName(f"{text!r:.80}: the version must be a number or 'latest'",
                              hint=f"write {name}, {name}:N or {name}:latest")
        return cls(name, int(number))

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}:{self.version}"


def parse_ref(text: object) -> tuple[str, int | None]:
    """``NAME``, ``NAME:N`` or ``NAME:latest`` -> (name, N or None for the latest)."""
    ref = DatasetRef.parse(text)
    return ref.name, ref.version


# -- data mounts -------------------------------------------------------------------------------

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
    if head.startswith("lib") or head in WORKSPACE_NAMES:
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


# -- params ------------------------------------------------------------------------------------

_PARAM_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_PARAMS = 256
"""The most params one job may have (each is a variable in its environment)."""
MAX_PARAM_VALUE = 65536
"""The longest param value (bytes): the kernel refuses a longer environment variable at start."""
_RESERVED_PARAMS = frozenset({"PATH", "HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONPATH",
                              "LD_PRELOAD", "LD_LIBRARY_PATH"})


def parse_param(text: object) -> tuple[str, str]:
    """``KEY=VALUE`` (``--param``): recorded with the job and passed to it in its environment."""
    key, sep, value = str(text).partition("=")
    if not sep or not _PARAM_KEY.fullmatch(key):
        raise InvalidSpec(f"--param {str(text):.80} is malformed",
                          hint="write KEY=VALUE with KEY made of letters, digits and '_', e.g. --param lr=0.01")
    if key.upper() in _RESERVED_PARAMS:
        raise InvalidSpec(f"--param {key} would override the job's {key.upper()}", hint="pick another name")
    if "\0" in value:
        raise InvalidSpec(f"--param {key}: the value holds a NUL byte", hint="pass plain text")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_PARAM_VALUE:
        raise InvalidSpec(f"--param {key}: the value is longer than {MAX_PARAM_VALUE} bytes",
                          hint="put long values in a file in the code folder or a dataset, and pass its path")
    return key, value


def check_params(raw: object) -> dict[str, str]:
    """Params as ``{KEY: VALUE}`` or a list of ``KEY=VALUE``; values become strings."""
    if not isinstance(raw, (list, tuple, dict)):
        raise InvalidSpec("params must be an object of KEY: VALUE", hint="use --param KEY=VALUE")
    if len(raw) > MAX_PARAMS:
        raise InvalidSpec(f"{len(raw)} params; a job takes at most {MAX_PARAMS}",
                          hint="put the rest in a config file in the code folder")
    if isinstance(raw, dict):
        raw = [f"{k}={v}" for k, v in raw.items()]
    return dict(parse_param(p) for p in raw)


# -- the spec of a job -----------------------------------------------------------------------

MAX_NODES = 64
"""The most boxes one distributed job may span."""
MAX_GPUS = 1024
"""The most GPUs a job may ask for on each box."""
MAX_COMMAND = 65536
"""The longest command (bytes): it is one argument of the shell, which the kernel caps at 128 KiB."""
MAX_MESSAGE = 4096
"""The longest message (characters) a job may carry."""
MAX_RUNTIME = 30 * 24 * 3600.0
"""The longest ``--max-runtime`` (seconds): 30 days. A job meant to run longer runs without
one; past this a deadline is a typo (``1e300``), not a plan."""
ENVIRONMENTS = ("default",)
"""Named environments; a project's floyd_requirements.txt adds packages on top of the chosen one."""
SPEC_FIELDS = ("command", "params", "code_tree", "data", "resources", "env", "message", "mode", "max_runtime",
               "restart")
"""What a job's spec holds in the replicated state; the rest is its state."""
RECORD_FIELDS = SPEC_FIELDS[:-1]
"""What a box's record of a run keeps of its spec (the restart policy is the cluster's business)."""


def check_max_runtime(value: object) -> float | None:
    """``--max-runtime``: None, or a finite number of seconds above 0 and at most
    :data:`MAX_RUNTIME` (``inf``, ``nan``, ``0`` and ``1e300`` are refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_RUNTIME:
        raise InvalidSpec(f"--max-runtime {value!r:.40} must be a number of seconds above 0 and at most "
                          f"{MAX_RUNTIME:.0f} (30 days)",
                          hint="e.g. --max-runtime 3600; leave it out to let the job run until it ends")
    return float(value)


RESTART_POLICIES = ("never", "on-failure", "on-lost")
"""``--restart``: ``never`` rerun; rerun a run that ``failed`` or was ``lost`` (``on-failure``);
rerun only a run ``lost`` with its box (``on-lost``, the default: a bug does not rerun, an
outage does)."""
DEFAULT_MAX_ATTEMPTS = 3
MAX_ATTEMPTS = 100
MAX_LOST_AFTER = 30 * 24 * 3600.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)?", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: object, flag: str = "--lost-after") -> float:
    """``90``, ``90s``, ``5m``, ``2h``, ``1d`` (or a number of seconds) -> seconds, above 0
    and at most 30 days."""
    hint = f"write a duration such as {flag} 90s, 5m or 2h"
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidSpec(f"{flag} {text!r:.40} is not a duration", hint=hint)
        seconds = float(match.group(1)) * _SECONDS[(match.group(2) or "").lower()]
    if not 0 < seconds <= MAX_LOST_AFTER:
        raise InvalidSpec(f"{flag} {text!r:.40} must be above 0 and at most 30 days", hint=hint)
    return seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartPolicy:
    """What happens to a run that fails or is lost (``floyd run --restart ... --max-attempts N
    --lost-after DURATION``), part of the job's spec.

    A rerun is the same job with a new attempt, placed anew (a gang whole), and its
    ``/output`` starts as the last attempt's: the convention for checkpoints is to write them
    into ``/output`` (atomically: a temporary name, then a rename) and to look there first at
    start. ``max_attempts`` counts the runs (the first and its reruns; a placement given up
    before the job started is not a run). ``lost_after``: how long the job's box may be out
    of touch (the job ``unknown``) before the run is declared lost; None: the cluster's
    ``job_lost_after``."""

    policy: str = "on-lost"
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lost_after: float | None = None

    def __post_init__(self) -> None:
        if self.policy not in RESTART_POLICIES:
            raise InvalidSpec(f"--restart {self.policy!r:.40} is not a restart policy",
                              hint=f"use one of {', '.join(RESTART_POLICIES)}")
        _whole(self.max_attempts, "--max-attempts", 1)
        if self.max_attempts > MAX_ATTEMPTS:
            raise InvalidSpec(f"--max-attempts {self.max_attempts} is more than {MAX_ATTEMPTS}",
                              hint=f"use at most --max-attempts {MAX_ATTEMPTS}")
        if self.lost_after is not None:
            parse_duration(self.lost_after)

    def reruns(self, state: str) -> bool:
        """Whether a run that ended ``state`` is run again (attempts left aside)."""
        if self.policy == "on-failure":
            return state in ("failed", "lost")
        return self.policy == "on-lost" and state == "lost"

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> RestartPolicy:
        """From the stored form; a spec stored before restart policies has none: the default."""
        raw = raw or {}
        return cls(policy=raw.get("policy") or "on-lost", max_attempts=raw.get("max_attempts") or DEFAULT_MAX_ATTEMPTS,
                   lost_after=raw.get("lost_after"))

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "max_attempts": self.max_attempts, "lost_after": self.lost_after}


def _whole(value: object, flag: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidSpec(f"{flag} {value!r:.80} must be a whole number ≥ {minimum}", hint=f"e.g. {flag} {minimum + 1}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """What a job needs on each box it runs on, and how many boxes.

    ``cpus`` (cores, in steps of 0.001) and ``memory`` (bytes) are what a box sets aside for
    the job while it is active: a box admits jobs while the ones it runs leave it the cores and
    memory asked (admission, not a limit: a job may use more than it asked). 0 asks for none;
    a spec stored before they existed has neither, and asks for none."""

    gpus: int = 0
    nodes: int = 1
    cpus: float = 0
    memory: int = 0

    def __post_init__(self) -> None:
        _whole(self.gpus, "--gpu", 0)
        if self.gpus > MAX_GPUS:
            raise InvalidSpec(f"--gpu {str(self.gpus)[:40]} is more than {MAX_GPUS}",
                              hint=f"use at most --gpu {MAX_GPUS}")
        if self.nodes == 0:
            raise InvalidSpec("--nodes 0: a job runs on at least one box", hint="e.g. --nodes 2")
        _whole(self.nodes, "--nodes", 1)
        if self.nodes > MAX_NODES:
            raise InvalidSpec(f"--nodes {str(self.nodes)[:40]} is more than {MAX_NODES}",
                              hint=f"use at most --nodes {MAX_NODES}")
        check_cpus(self.cpus)
        _whole(self.memory, "--memory", 0)
        if self.memory > MAX_MEMORY:
            raise InvalidSpec(f"--memory {format_size(self.memory)} is more than {format_size(MAX_MEMORY)}",
                              hint="ask for the memory of one box, e.g. --memory 16G")

    @property
    def cpu_milli(self) -> int:
        """``cpus`` in thousandths of a core (what placement and the state add up)."""
        return round(self.cpus * 1000)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> Resources:
        raw = raw or {}
        return cls(gpus=raw.get("gpus") or 0, nodes=raw.get("nodes") or 1, cpus=raw.get("cpus") or 0,
                   memory=raw.get("memory") or 0)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: ``{"gpus", "cpu"}``, ``"nodes"`` for a job over several boxes, and
        ``"cpus"``/``"memory"`` when asked for."""
        return {"gpus": self.gpus, "cpu": self.gpus == 0, **({"nodes": self.nodes} if self.nodes > 1 else {}),
                **({"cpus": self.cpus} if self.cpus else {}), **({"memory": self.memory} if self.memory else {})}

    def describe(self) -> str:
        """``2 GPUs, 4 CPUs, 16 GiB`` (per box): what ``floyd run`` and waiting reasons say."""
        return describe_needs(self.gpus, self.cpu_milli, self.memory)


def asked_per_box(spec: object) -> tuple[int, int]:
    """(thousandths of a core, bytes of memory) a job's spec asks for on each box: (0, 0) for
    a spec from before they existed, or one whose values are not counts (a job.submit is
    any dict an authorised node sent: the index never trusts it to be well formed)."""
    resources = spec.get("resources") if isinstance(spec, dict) else None
    if not isinstance(resources, dict):
        return 0, 0
    cpu, memory = known_count(resources.get("cpus"), 1000), known_count(resources.get("memory"), 1)
    return cpu or 0, memory or 0


def known_count(value: object, scale: int) -> int | None:
    """A non-negative count times ``scale``, as an int; None if ``value`` is no such count."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**53:
        return None
    return round(value * scale)


MAX_CPUS = 4096
"""The most cores a job may ask for on each box."""
MAX_MEMORY = 1 << 50
"""The most memory (bytes, 1 PiB) a job may ask for on each box."""
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([kmgtp]?)(i?b?)", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def check_cpus(value: object) -> float:
    """``--cpu N``: a number of cores ≥ 0 and at most :data:`MAX_CPUS`, in steps of 0.001."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_CPUS \
            or abs(round(value * 1000) - value * 1000) > 1e-6:
        raise InvalidSpec(f"--cpu {value!r:.40} must be a number of cores from 0 to {MAX_CPUS} "
                          "(in steps of 0.001)", hint="e.g. --cpu 4, or --cpu 0.5 for half a core")
    return value


def parse_size(text: object) -> int:
    """``--memory SIZE``: ``16G``, ``512M``, ``1.5GiB``, ``64k`` (powers of 1024, as Slurm and
    Docker read them) or a number of bytes given as an int; a bare number in text is refused
    unless 0 (``--memory 16`` is more likely a typo than 16 bytes)."""
    if isinstance(text, int) and not isinstance(text, bool):
        _whole(text, "--memory", 0)
        return text
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    hint = "write a size with its unit, e.g. --memory 16G or --memory 512M"
    if match is None:
        raise InvalidSpec(f"--memory {text!r:.40} is not a size", hint=hint)
    number, unit, _ = match.groups()
    if not unit and float(number) != 0:
        raise InvalidSpec(f"--memory {text!r:.40} has no unit", hint=hint)
    size = int(float(number) * _UNITS[unit.lower()])
    if size > MAX_MEMORY:
        raise InvalidSpec(f"--memory {text!r:.40} is more than {format_size(MAX_MEMORY)}", hint=hint)
    return size


def format_size(size: int) -> str:
    """Bytes as people read them: ``16 GiB``, ``1.5 GiB``, ``512 MiB``, ``300 B``."""
    for unit, scale in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} B"


def format_cpus(milli: int) -> str:
    """Thousandths of a core as people read them: ``1 CPU``, ``4 CPUs``, ``0.5 CPUs``."""
    text = f"{milli / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{text} CPU" if milli == 1000 else f"{text} CPUs"


def describe_needs(gpus: int, cpu_milli: int = 0, memory: int = 0) -> str:
    """``2 GPUs, 4 CPUs and 16 GiB``; only what is asked (``1 GPU``; ``CPU`` when nothing is)."""
    words = ([f"{gpus} GPU" if gpus == 1 else f"{gpus} GPUs"] if gpus else []) + \
        ([format_cpus(cpu_milli)] if cpu_milli else []) + ([format_size(memory)] if memory else [])
    if not words:
        return "CPU"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What a job runs with; fixed at submission (code snapshotted, data versions pinned)."""

    command: str
    code_tree: str
    params: dict[str, str] = field(default_factory=dict)
    data: tuple[Mount, ...] = ()
    resources: Resources = Resources()
    env: str = "default"
    message: str = ""
    mode: str = "job"
    max_runtime: float | None = None
    restart: RestartPolicy = RestartPolicy()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> JobSpec:
        """From the stored form (replicated state, records); unknown keys are ignored, and a
        spec stored before restart policies (or a record, which keeps none) gets the default."""
        return cls(command=raw["command"], code_tree=raw["code_tree"], params=dict(raw.get("params") or {}),
                   data=tuple(Mount(ref=m["ref"], tree=m["tree"], mount=m["mount"]) for m in raw.get("data") or ()),
                   resources=Resources.from_dict(raw.get("resources")), env=raw.get("env") or "default",
                   message=raw.get("message") or "", mode=raw.get("mode") or "job", max_runtime=raw.get("max_runtime"),
                   restart=RestartPolicy.from_dict(raw.get("restart")))

    def to_dict(self) -> dict[str, Any]:
        """The stored form: plain data with exactly :data:`SPEC_FIELDS`."""
        return {"command": self.command, "params": dict(self.params), "code_tree": self.code_tree,
                "data": [m.to_dict() for m in self.data], "resources": self.resources.to_dict(),
                "env": self.env, "message": self.message, "mode": self.mode, "max_runtime": self.max_runtime,
                "restart": self.restart.to_dict()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A ``POST /v1/jobs`` body (and what ``floyd run`` sends), checked field by field.

    The code comes as ``code_path`` (a folder on the daemon's machine, which it snapshots)
    or ``code_tree`` (already in the store: ``POST /v1/code``, or a restart); the data refs
    are resolved to exact versions by the daemon."""

    project: str
    command: str
    code_path: str | None = None
    code_tree: str | None = None
    gpus: int = 0
    nodes: int = 1
    cpus: float | None = None
    """Cores on each box; None: the receiving daemon's ``job_cpus``."""
    memory: int | str | None = None
    """Bytes (or a size such as ``"16G"``) on each box; None: the daemon's ``job_memory``."""
    data: tuple[str | MountRequest, ...] = ()
    params: dict[str, Any] | tuple[str, ...] = field(default_factory=dict)
    env: str = "default"
    message: str = ""
    max_runtime: float | None = None
    mode: str = "job"
    idem_key: str | None = None
    restart: str = "on-lost"
    """The restart policy (:data:`RESTART_POLICIES`)."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lost_after: float | str | None = None
    """Seconds (or ``"90s"``, ``"5m"``) its box may be out of touch; None: the cluster's default."""

    def __post_init__(self) -> None:
        check_project(self.project)
        if not isinstance(self.command, str) or not self.command.strip():
            raise InvalidSpec("the command is empty", hint='give the command to run, e.g. floyd run "python train.py"')
        if len(self.command.encode("utf-8", "surrogateescape")) > MAX_COMMAND:
            raise InvalidSpec(f"the command is longer than {MAX_COMMAND} bytes",
                              hint="put it in a script in the code folder and run the script")
        if not isinstance(self.message, str):
            raise InvalidSpec("the message must be text", hint='e.g. -m "bigger batch"')
        if len(self.message) > MAX_MESSAGE:
            raise InvalidSpec(f"the message is longer than {MAX_MESSAGE} characters", hint="say it in fewer words")
        if self.code_tree is not None:
            if not isinstance(self.code_tree, str) or not re.fullmatch(r"[0-9a-f]{64}", self.code_tree):
                raise InvalidSpec(f"code_tree {self.code_tree!r:.80} is not a tree id",
                                  hint="leave it out and send code_path instead")
        else:
            check_abs_path(self.code_path, "code_path", hint="run floyd from inside the project folder")
        self.resources  # checks gpus, nodes, cpus and memory
        check_max_runtime(self.max_runtime)
        self.restart_policy  # checks restart, max_attempts and lost_after
        if self.env not in ENVIRONMENTS:
            raise InvalidSpec(f"unknown environment {self.env!r:.80}",
                              hint=f"available: {', '.join(ENVIRONMENTS)}; add packages with a floyd_requirements.txt")
        if self.mode != "job":
            raise InvalidSpec(f"--mode {self.mode:.80} is not supported", hint="use --mode job (the default)")
        if self.idem_key is not None and not 8 <= len(self.idem_key) <= 128:
            raise InvalidSpec("idem_key must be a string of 8-128 characters",
                              hint="leave it out; the CLI sends a fresh one per floyd run")
        check_params(self.params)
        check_mounts(list(self.data))

    @property
    def resources(self) -> Resources:
        """What the job asks for; cpus and memory left unset ask for none (the daemon sets
        its defaults with :meth:`with_defaults` before it commits the job)."""
        return Resources(gpus=self.gpus, nodes=self.nodes, cpus=self.cpus or 0,
                         memory=0 if self.memory is None else parse_size(self.memory))

    def with_defaults(self, *, cpus: float, memory: int) -> Submission:
        """This submission with unset ``cpus``/``memory`` given these (a daemon's defaults)."""
        return replace(self, cpus=cpus if self.cpus is None else self.cpus,
                       memory=memory if self.memory is None else self.memory)

    @property
    def restart_policy(self) -> RestartPolicy:
        return RestartPolicy(policy=self.restart, max_attempts=self.max_attempts,
                             lost_after=None if self.lost_after is None else parse_duration(self.lost_after))

    @property
    def mounts(self) -> list[MountRequest]:
        return check_mounts(list(self.data))

    def spec(self, *, code_tree: str, data: tuple[Mount, ...]) -> JobSpec:
        """The job's spec once its code is snapshotted and its data resolved."""
        return JobSpec(command=self.command, code_tree=code_tree, params=check_params(self.params), data=data,
                       resources=self.resources, env=self.env, message=self.message, mode=self.mode,
                       max_runtime=None if self.max_runtime is None else float(self.max_runtime),
                       restart=self.restart_policy)



@dataclass(frozen=True, slots=True, kw_only=True)
class Restart:
    """A ``POST /v1/jobs/{project}/{n}/restart`` body: what to change for the new run (the
    rest is the old job's: code, data, params, resources, environment)."""

    gpus: int | None = None
    nodes: int | None = None
    cpus: float | None = None
    memory: int | str | None = None
    command: str | None = None
    params: dict[str, Any] | tuple[str, ...] | None = None
    message: str | None = None
    max_runtime: float | None = None
    env: str | None = None
    data: tuple[str | MountRequest, ...] | None = None
    restart: str | None = None
    max_attempts: int | None = None
    lost_after: float | str | None = None

    def submission(self, key: JobKey, old: Mapping[str, Any]) -> Submission:
        """The new run of job ``key``, whose record is ``old``, with these changes."""
        resources = Resources.from_dict(old.get("resources"))
        asked = old.get("resources") or {}          # a spec from before cpus/memory gets the defaults
        data = self.data if self.data is not None else tuple(f"{d['ref']}:{d['mount']}" for d in old["data"])
        policy = RestartPolicy.from_dict(old.get("restart"))
        return Submission(restart=self.restart or policy.policy,
                          max_attempts=self.max_attempts or policy.max_attempts,
                          lost_after=policy.lost_after if self.lost_after is None else self.lost_after,
                          project=key.project, command=self.command or old["command"], code_tree=old["code_tree"],
                          gpus=resources.gpus if self.gpus is None else self.gpus,
                          nodes=resources.nodes if self.nodes is None else self.nodes,
                          cpus=asked.get("cpus") if self.cpus is None else self.cpus,
                          memory=asked.get("memory") if self.memory is None else self.memory, data=data,
                          params={**old["params"], **check_params(self.params or {})},
                          env=self.env or old["env"], message=self.message or f"restart of {key}",
                          max_runtime=old["max_runtime"] if self.max_runtime is None else self.max_runtime)
