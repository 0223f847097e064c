"""One frozen config tree: defaults < TOML file < ``FLOYDD_*`` env < flags.

Every knob is documented where it is defined. ``preset_for_tests`` (as Nomad's
``TestConfigForServer``) gives tight timings for tests; production code never
switches to it by itself.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import platformdirs

from floydd.errors import InvalidSpec, UserError
from floydd.model import (DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_LOST_AFTER, DEFAULT_STOP_GRACE, check_cpus,
                          parse_size)
from floydd.security.owned_dirs import shared_socket_dir
from floydd.system import system_paths

__all__ = ["Config", "load", "settings_line", "default_state_dir", "socket_path_for", "preset_for_tests", "DEFAULT_PORT",
           "DEFAULT_API_PORT"]

DEFAULT_PORT = 7654
"""A box's node-to-node (mTLS) port unless ``cluster.json`` says another."""
DEFAULT_API_PORT = DEFAULT_PORT + 1
"""Its TLS API port (``floyd login HOST`` without a port) unless ``cluster.json`` says another."""

ENV_PREFIX = "FLOYDD_"
CONFIG_FILE = "floydd.toml"
# sun_path is 108 bytes on Linux; leave room for the terminating NUL.
_MAX_SOCKET_PATH = 100


def default_state_dir() -> Path:
    """Where a user daemon keeps its state: the user's data dir (``~/.local/share/floydd``)."""
    return Path(platformdirs.user_data_dir("floydd", appauthor=False))


def socket_path_for(state_dir: Path) -> Path:
    """The API socket of the daemon owning ``state_dir``.

    It lives in the state dir (owner-only). A state dir too deep for a unix
    socket path gets a short folder under the temp dir whose name is derived from
    the state dir, so daemon and clients agree without talking; that folder is in a
    shared place, so the daemon makes it 0700 and both sides refuse one that is not
    safely theirs (:mod:`floydd.security.owned_dirs`).
    """
    state_dir = Path(state_dir).absolute()
    path = state_dir / "floydd.sock"
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    return shared_socket_dir(state_dir) / "floydd.sock"


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Everything a daemon needs to know; build it with :func:`load`."""

    state_dir: Path = field(default_factory=default_state_dir)
    """Store, records, job workspaces, socket, lock and log live here."""
    node_name: str = field(default_factory=socket.gethostname)
    """Name shown in listings; defaults to the host name."""
    dev_tcp: str = ""
    """A dev/test option: the API also on plain HTTP at a loopback ``HOST:PORT``, guarded by one
    shared token (``STATE/api-token``) that acts as the daemon's own user. People elsewhere use
    the TLS API with a personal token instead (``floyd login``)."""
    sandbox: str = "auto"
    """How jobs and environment builds are sandboxed (:mod:`floydd.runtime.sandboxing`):
    ``require`` (bubblewrap, or no job runs here: ``floyd run`` is refused; ``bwrap`` says the
    same), ``prefer`` (bubblewrap when it works, else unsandboxed, said loudly at start-up, on
    every ``floyd run`` and in ``floyd info``), ``none`` (never; tests and debugging), or
    ``auto``: ``require`` when the daemon serves more than its own user (``system``, or a
    group-accessible socket), ``prefer`` otherwise."""
    system: bool = False
    """The daemon serves more than its own user (a service install, ``floydd start --system``:
    :mod:`floydd.system`): jobs must be sandboxed unless ``sandbox`` says otherwise, and run as
    ``job_user``, never as root or the daemon's user; the API socket is ``socket``, reachable by
    the group ``socket_group``."""
    socket: str = ""
    """The API socket's path; empty: ``floydd.sock`` in the state dir (a user daemon). A system
    daemon's is ``/run/floydd/floydd.sock``."""
    socket_group: str = ""
    """The group whose members may use the API socket (socket 0660, its folder 0750); empty:
    owner only. ``floydd start --system`` sets ``floyd``."""
    job_user: str = "floyd-job"
    """In system mode, the unprivileged account every job runs as (inside the sandbox): files a
    job writes are that user's, it can read nothing of the daemon's. Create it once:
    ``useradd --system --no-create-home --shell /usr/sbin/nologin floyd-job``."""
    build_network: bool = True
    """Whether ``floyd_requirements.txt`` builds may use the network (pip's index, the
    site's pip.conf). Off: pip installs only from ``wheelhouse`` (``--no-index``)."""
    wheelhouse: str = ""
    """A folder of wheels for environment builds (``pip --find-links``), shown read-only
    inside the build's sandbox; with ``build_network = false`` the only source."""
    agent_spare_idle: float = 600.0
    """Seconds a spare agent (:mod:`floydd.runtime.spare`: started ahead, so the next job starts
    without waiting ~0.1 s for Python) is kept after the box last started a job; 0: none."""
    job_env_pass: str = ""
    """Names of the daemon's environment variables jobs get on top of the allow-list
    (:mod:`floydd.agent.jobenv`: locale, TZ, CUDA_*, NCCL_*, NVIDIA_*), comma-separated;
    ``NAME*`` passes a prefix. E.g. ``"HTTPS_PROXY,NO_PROXY"``."""

    def __post_init__(self) -> None:
        if self.sandbox not in ("auto", "require", "prefer", "bwrap", "none"):
            raise UserError(f"sandbox {self.sandbox!r} is not one of auto, require, prefer, none",
                            hint="set FLOYDD_SANDBOX or --sandbox to auto, require, prefer or none")
        try:
            check_cpus(self.job_cpus)
            parse_size(self.job_memory)
        except InvalidSpec as exc:
            raise UserError(f"config: {exc.message}",
                            hint="set job_cpus to a number of cores (e.g. 1) and job_memory to a size "
                                 "(e.g. 2G, or 0) in floydd.toml or FLOYDD_JOB_CPUS/FLOYDD_JOB_MEMORY") from None
        for name in ("job_outputs", "job_code", "job_logs"):      # floydd.cluster.state.access.ReadRules
            if getattr(self, name) not in ("owner", "lab"):
                raise UserError(f"config {name} = {getattr(self, name)!r:.40} is not owner or lab",
                                hint=f"set {name} to owner (the job's owner and the admins) or lab (everyone) in "
                                     f"floydd.toml or {ENV_PREFIX}{name.upper()}")
        for name in ("max_upload_gb", "max_log_mb", "max_metric_points", "max_queued_per_person"):
            if not getattr(self, name) >= 0:      # limits against floods: 0 turns one off
                raise UserError(f"config: {name} = {getattr(self, name)} is negative",
                                hint=f"set {name} to 0 (no limit) or more in floydd.toml or {ENV_PREFIX}{name.upper()}")

    @property
    def job_memory_bytes(self) -> int:
        """``job_memory`` in bytes."""
        return parse_size(self.job_memory)
    dev_fake_gpus: str = ""
    """DEV/TEST ONLY: describe fake GPUs (``"2"``, ``"4xA100-80GB"``) instead of asking NVML."""
    max_code_mb: float = 100.0
    """A code folder above this size is refused: data belongs in ``floyd data``."""
    inventory_interval: float = 5.0
    """Seconds between node inventory samples (NVML, psutil)."""
    sample_interval: float = 5.0
    """Seconds between per-job system samples (CPU, RAM, GPU)."""
    tail_interval: float = 0.2
    """Seconds between looks at a running job's log and status files."""
    stop_grace: float = DEFAULT_STOP_GRACE
    """Seconds a stopped or timed-out job gets after SIGTERM before SIGKILL."""
    log_level: str = "info"
    """Daemon log level: debug, info, warning, error."""
    cluster_heartbeat: float = 5.0
    """Seconds between this node's heartbeats to the cluster; a node is listed as stale
    after four missed ones."""
    job_cpus: float = 1.0
    """Cores a job submitted here sets aside on each box it runs on when ``floyd run`` does
    not say (``--cpu N``). A box admits jobs while the ones it runs leave it the cores and
    memory they ask; 0 sets none aside (jobs then queue only for GPUs and memory)."""
    job_memory: str = "0"
    """Memory a job submitted here sets aside on each box when ``floyd run`` does not say
    (``--memory SIZE``): ``16G``, ``512M``...; ``0`` sets none aside. Admission only: a job
    may use more than it asked, the box just does not start more than fits."""
    job_lost_after: float = DEFAULT_LOST_AFTER
    """Seconds a job's box may be out of touch (the job ``unknown``) before the leader
    declares the run lost and the job's restart policy decides (``floyd run --lost-after``
    overrides it per job). An outage shorter than this is not a failure: a box that comes back
    with the job still running simply carries on. A box stopped cleanly (``off``) is judged
    the same way from when it stopped (drain it first: ``floydd drain --wait``)."""
    node_suspect_after: float = 3.0
    """Seconds the leader may go without hearing from a box before it marks it ``suspect``:
    nothing new is placed there, its jobs not yet started are placed elsewhere, its running
    ones become ``unknown``."""
    max_clock_skew: float = 30.0
    """Seconds this box's wall clock may be from the cluster leader's before ``floyd nodes``,
    ``floydd members`` and ``floydd status`` flag it and it is logged at WARNING (once per
    episode). Liveness and ``--lost-after`` never read wall clocks; people and TLS do."""
    checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL
    """Seconds between snapshots of a running job's ``/output``, published as versions of its
    output so that a rerun (after its box was lost for good) starts from them; 0 turns them
    off (a rerun then starts from the last attempt's final output only)."""
    # -- replicas kept (issue 12): floydd.cluster.replication.replicas, floydd.cluster.replication.storecare --
    replica_grace: float = 300.0
    """Seconds a box holding a dataset copy may stay silent (crashed, cut off, switched off)
    before its copies stop counting and another box makes a new one; a box that returns
    counts again from its first heartbeat. Long enough for a reboot or an upgrade."""
    dataset_copy_wait: float = 60.0
    """Seconds ``floyd data upload`` waits for every copy (2) to be stored before it answers
    with fewer, saying so ("stored on 1 of 2 boxes; the second copy follows")."""
    code_copy_wait: float = 20.0
    """Seconds a submit waits for every copy (as many as a dataset version's) of the job's code
    before it answers with fewer, saying so in its warnings (issue 21: floydd.cluster.replication.codecopies)."""
    store_scrub_rate: float = 2.0
    """MB a second the background scrub re-reads and checks (0 turns it off): at 2, a pass
    over 1 TB takes about 6 days. What it finds damaged is repaired from another box."""
    store_scrub_every: float = 7 * 86400.0
    """Seconds between the starts of two scrub passes: a pass that ends sooner waits."""
    # -- store key epochs (issue 21): floydd.store.keys.epochs, floydd.daemon.epochs --
    store_reseal_rate: float = 100.0
    """MB a second the background re-seal rewrites after a new store key epoch
    (``floydd rotate-store-key``, ``floydd remove``): at 100, 1 TB takes about 3 hours,
    while the daemon serves. 0 turns it off (objects stay under the older epoch). The re-seal
    of a box that joins a cluster keeps to it too; at 0 that one runs unpaced (its datasets
    join the cluster's catalog only once it is done)."""
    store_direct_io: bool = False
    """Write the store's objects with direct I/O and prove reused ones from the device
    (:mod:`floydd.store.fileio`): an upload neither fills the page cache with sealed objects
    nor evicts what people and jobs had cached, and costs ~40 % less CPU (1 GiB, issue 23),
    but a job or re-upload that reads a dataset right after its upload reads the disk
    instead of the cache. Off by default. Filesystems without direct I/O (tmpfs) ignore it."""
    store_epoch_check: float = 5.0
    """Seconds between two looks for a key epoch this box lacks (asked from a member)."""
    # -- state that stays small (issue 12): floydd.cluster.archiver, floydd.cluster.state.archive --
    archive_after: float = 7 * 86400.0
    """Seconds after it ended that a finished job leaves the hot replicated state (kept in
    memory on every box) for the archive (SQLite on every box): it is still listed by
    ``floyd status --all`` and read by ``floyd info``; its log and metrics stay on the box
    that ran it. Set on the leader (every box, to survive a change of leader)."""
    archive_keep: int = 1000
    """At most this many finished jobs stay hot; the oldest beyond it are archived sooner."""
    raft_snapshot_every: int = 10_000
    """Entries of the control plane's log applied between two snapshots of its state (the log
    before a snapshot is dropped; a box that needs it is sent the snapshot, streamed, with the
    archive). Lower it to test that path; the default keeps the log in memory under ~10 MB."""
    # -- trust between boxes (issue 13): floydd.daemon.joining --
    cert_validity: float = 365 * 86400.0
    """Seconds a node certificate this node signs is valid (at ``floydd init``, for joins and
    renewals it admits; every voter holds the CA key). Nodes renew theirs by themselves."""
    cert_renew_before: float = 0.0
    """Seconds before its certificate expires that a node renews it; 0: when a third of the
    certificate's life is left (four months of a year)."""
    join_attempts_per_minute: float = 10.0
    """Join attempts a voter accepts from one address a minute (and up to as many at once);
    more get HTTP 429 with Retry-After. Every attempt is logged."""
    # -- failed authentications on the TLS API (issue 20): floydd.api.throttle --
    api_auth_failures: int = 20
    """Failed personal tokens one source (an IPv4 address, an IPv6 /64) may send the TLS API at
    once, and then per ``api_auth_window``; past that its requests are answered 429 with
    Retry-After before their token is read. A person who mistypes a token a few times never
    notices; a script that floods bad tokens gets a check every window/failures seconds."""
    api_auth_window: float = 60.0
    """Seconds over which ``api_auth_failures`` refill, and between two log lines about one
    source's refused tokens (one line counts them all: "refused 2,214 bad tokens from ...")."""

    # -- who reads what a job made (issue 20): floydd.cluster.state.access --
    job_outputs: str = "owner"
    """Who reads, mounts and clones a job's output (its /output versions and checkpoints,
    ``PROJECT/N/output``) through this box: ``owner`` (the job's owner and the admins) or
    ``lab`` (everyone). A read rule: the box a person asks applies its own; set it alike on
    every box of a cluster."""
    job_code: str = "owner"
    """Who reads a job's code (``floyd clone``, ``code.tar``, an export) through this box:
    ``owner`` (the job's owner and the admins) or ``lab`` (everyone)."""
    job_logs: str = "lab"
    """Who reads a job's logs and metrics (``floyd logs``, ``floyd compare``, the TUI) through
    this box: ``lab`` (everyone, as everyone sees the lab's jobs) or ``owner``."""

    # -- limits against floods (issue 20): floydd.store.tarball, floydd.agent.capture,
    #    floydd.runtime.watch, floydd.jobs.service --
    max_upload_gb: float = 100.0
    """A dataset sent as a tar (``floyd data upload`` from another machine, ``POST
    /v1/datasets/tar``) may unpack to at most this many GiB, files counted at their real size
    (a sparse file at its expanded size): past it the upload is refused (HTTP 413) before more
    is written. 0: no limit. Code folders have their own, ``max_code_mb``."""
    max_log_mb: float = 256.0
    """A job's ``job.log`` grows to at most this many MiB; past it the agent drops the job's
    output and counts it, keeps the last line of each metric, and ends the log with what was
    dropped (also an event of the job: ``floyd info``). 0: no cap."""
    max_metric_points: int = 1_000_000
    """Metric points recorded per job in full; past it, each batch read from the job's log
    (1 MiB) keeps only the last point of each metric (the series thins out, the last values
    stay right) and the others are counted as skipped. 0: no cap."""
    max_queued_per_person: int = 1000
    """Jobs one person may have queued in the cluster; a submit past it is refused (HTTP 429)
    until some start or are stopped. Checked by the box that takes the submit, against the
    replicated job table. 0: no limit."""

    @property
    def socket_path(self) -> Path:
        return Path(self.socket) if self.socket else socket_path_for(self.state_dir)

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "floydd.lock"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "floydd.log"

    @property
    def log_where(self) -> str:
        """Where to read this daemon's log, as said to people: the journal for a service
        (:mod:`floydd.daemon.logs`), else the file."""
        return "the journal (journalctl -u floydd)" if self.system else str(self.log_path)

    @property
    def store_dir(self) -> Path:
        return self.state_dir / "store"

    @property
    def records_path(self) -> Path:
        return self.state_dir / "records.db"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"


def preset_for_tests(state_dir: Path, **overrides: Any) -> Config:
    """Tight timings for tests: fast tails and samples, short grace."""
    base = dict(state_dir=Path(state_dir), node_name="test-node", sandbox="auto",
                inventory_interval=0.5, sample_interval=0.5, tail_interval=0.05, stop_grace=2.0)
    base.update(overrides)
    return Config(**base)


def load(flags: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
         file: Path | None = None) -> Config:
    """Layer defaults < TOML < ``FLOYDD_*`` env < flags (``None`` flags are unset)."""
    env = os.environ if env is None else env
    known = {f.name: f for f in fields(Config)}
    values: dict[str, Any] = {}
    flags = {k: v for k, v in (flags or {}).items() if v is not None}

    state_dir = flags.get("state_dir") or env.get(ENV_PREFIX + "STATE_DIR")
    sys_paths = system_paths(env)
    asked_system = bool(flags.get("system")) or _coerce("system", env.get(ENV_PREFIX + "SYSTEM") or "0", known["system"])
    if file is None:
        base = Path(state_dir) if state_dir else default_state_dir()
        candidate = sys_paths.config_file if asked_system and not state_dir else base / CONFIG_FILE
        file = candidate if candidate.exists() else None
    if file is not None:
        values.update(_read_toml(Path(file), known))
    for name in known:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = raw
    values.update(flags)
    if _coerce("system", values.get("system", False), known["system"]) and "state_dir" not in values:
        # a service install: its state, socket and group unless the config names others (a
        # state dir named explicitly keeps its own socket, as a user daemon's)
        values["state_dir"] = sys_paths.state_dir
        values.setdefault("socket", str(sys_paths.socket_path))
        values.setdefault("socket_group", sys_paths.group)
    return Config(**{k: _coerce(k, v, known[k]) for k, v in values.items()})


def _read_toml(path: Path, known: Mapping[str, dataclasses.Field]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"config file {path} does not exist",
                        hint="create it or leave out --config") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"config file {path} is not valid TOML: {exc}",
                        hint="fix the line it names") from None
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UserError(f"config file {path} has unknown keys: {', '.join(unknown)}",
                        hint=f"known keys: {', '.join(sorted(known))}")
    return data


def _coerce(name: str, value: Any, f: dataclasses.Field) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    try:
        if kind == "Path":
            return Path(value).expanduser().absolute()
        if kind == "float":
            return float(value)
        if kind == "int":
            return int(value)
        if kind == "bool":
            if isinstance(value, str):
                word = value.strip().lower()
                if word not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                return word in ("1", "true", "yes", "on")
            if not isinstance(value, bool):
                raise TypeError(value)
            return value
        return str(value)
    except (TypeError, ValueError):
        raise UserError(f"config value {name}={value!r} is not a valid {kind}",
                        hint=f"set {ENV_PREFIX}{name.upper()} or the TOML key {name} to a {kind}") from None


_NOT_SETTINGS = frozenset({"state_dir", "node_name", "socket"})
"""Where a daemon lives and what it is called: said elsewhere (its node record), not settings."""


def settings_line(config: Config) -> str:
    """What the operator set, ``key=value`` for every setting that differs from the default,
    sorted (what the audit log records when a box starts with other settings than before)."""
    default = Config()
    changed = [f"{f.name}={getattr(config, f.name)}" for f in fields(Config)
               if f.name not in _NOT_SETTINGS and getattr(config, f.name) != getattr(default, f.name)]
    return " ".join(sorted(changed)) or "defaults"
