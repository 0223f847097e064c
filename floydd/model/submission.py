"""The request bodies that make a job, checked field by field: a submission (``POST
/v1/jobs``, what ``floyd run`` sends) and a restart's changes (``POST
/v1/jobs/{project}/{n}/restart``), and the limits a request is held to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from floydd.errors import InvalidSpec
from floydd.model.mounts import Mount, MountRequest, check_mounts
from floydd.model.names import JobKey, check_abs_path, check_project
from floydd.model.params import check_params
from floydd.model.resources import Resources, parse_size
from floydd.model.defaults import DEFAULT_ENV, DEFAULT_MAX_ATTEMPTS, DEFAULT_MODE, DEFAULT_RESTART
from floydd.model.restart import RestartPolicy, parse_duration
from floydd.model.spec import JobSpec

if TYPE_CHECKING:
    from floydd.model.view import JobView

__all__ = ["Submission", "Restart", "MAX_COMMAND", "MAX_MESSAGE", "MAX_RUNTIME", "ENVIRONMENTS",
           "check_max_runtime", "CODE_UPLOAD_PATTERN"]

MAX_COMMAND = 65536
"""The longest command (bytes): it is one argument of the shell, which the kernel caps at 128 KiB."""
MAX_MESSAGE = 4096
"""The longest message (characters) a job may carry."""
MAX_RUNTIME = 30 * 24 * 3600.0
"""The longest ``--max-runtime`` (seconds): 30 days. A job meant to run longer runs without
one; past this a deadline is a typo (``1e300``), not a plan."""
ENVIRONMENTS = (DEFAULT_ENV,)
"""Named environments; a project's floyd_requirements.txt adds packages on top of the chosen one."""
CODE_UPLOAD_PATTERN = r"cu-[0-9a-f]{32}"
"""A code upload's handle (``POST /v1/code``, :class:`floydd.jobs.codesnap.CodeUploads`)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A ``POST /v1/jobs`` body (and what ``floyd run`` sends), checked field by field.

    The code comes as ``code_path`` (a folder on the daemon's machine, which it snapshots:
    the daemon's own user only) or ``code_upload`` (the handle ``POST /v1/code`` answered the
    person who sent the folder there); never as a tree id, which would name any tree of the
    store. A submission with neither is the daemon's own (a restart: it passes the old job's
    tree itself) or a check (``/v1/jobs/check``); the data refs are resolved to exact versions
    by the daemon."""

    project: str
    command: str
    code_path: str | None = None
    code_upload: str | None = None
    gpus: int = 0
    """GPUs on each box (the API's name; the job's :attr:`Resources.gpu_count`)."""
    nodes: int = 1
    cpus: float | None = None
    """Cores on each box; None: the receiving daemon's ``job_cpus``."""
    memory: int | str | None = None
    """Bytes (or a size such as ``"16G"``) on each box; None: the daemon's ``job_memory``."""
    data: tuple[str | MountRequest, ...] = ()
    params: dict[str, Any] | tuple[str, ...] = field(default_factory=dict)
    env: str = DEFAULT_ENV
    message: str = ""
    max_runtime: float | None = None
    mode: str = DEFAULT_MODE
    idem_key: str | None = None
    restart: str = DEFAULT_RESTART
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
        if self.code_upload is not None:
            if not isinstance(self.code_upload, str) or not re.fullmatch(CODE_UPLOAD_PATTERN, self.code_upload):
                raise InvalidSpec(f"code_upload {self.code_upload!r:.80} is not a code upload handle",
                                  hint="send the folder to POST /v1/code and submit with the code_upload it answers")
            if self.code_path is not None:
                raise InvalidSpec("send code_path or code_upload, not both", hint="floyd run sends one of them")
        elif self.code_path is not None:
            check_abs_path(self.code_path, "code_path", hint="run floyd from inside the project folder")
        self.resources  # checks gpus, nodes, cpus and memory
        check_max_runtime(self.max_runtime)
        self.restart_policy  # checks restart, max_attempts and lost_after
        if self.env not in ENVIRONMENTS:
            raise InvalidSpec(f"unknown environment {self.env!r:.80}",
                              hint=f"available: {', '.join(ENVIRONMENTS)}; add packages with a floyd_requirements.txt")
        if self.mode != DEFAULT_MODE:
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
        return Resources(gpu_count=self.gpus, nodes=self.nodes, cpus=self.cpus or 0,
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

    def submission(self, key: JobKey, old: JobView) -> Submission:
        """The new run of job ``key``, which is ``old`` (as the API shows it), with these changes
        (its code, ``old.code_tree``, the daemon passes on by itself: :meth:`JobService.restart
        <floydd.jobs.service.JobService.restart>`)."""
        asked = old.resources                       # a spec from before cpus/memory gets the defaults
        resources = Resources() if asked is None else asked.asked()
        data = self.data if self.data is not None else tuple(f"{d.ref}:{d.mount}" for d in old.data)
        policy = old.restart.asked() if old.restart else RestartPolicy()    # none: stored before restart policies
        return Submission(restart=self.restart or policy.policy,
                          max_attempts=self.max_attempts or policy.max_attempts,
                          lost_after=policy.lost_after if self.lost_after is None else self.lost_after,
                          project=key.project, command=self.command or old.command,
                          gpus=resources.gpu_count if self.gpus is None else self.gpus,
                          nodes=resources.nodes if self.nodes is None else self.nodes,
                          cpus=(asked and asked.cpus or None) if self.cpus is None else self.cpus,
                          memory=(asked and asked.memory or None) if self.memory is None else self.memory, data=data,
                          params={**old.params, **check_params(self.params or {})},
                          env=self.env or old.env, message=self.message or f"restart of {key}",
                          max_runtime=old.max_runtime if self.max_runtime is None else self.max_runtime)
