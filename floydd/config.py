"""One frozen config tree: defaults < TOML file < ``FLOYDD_*`` env < flags.

Every knob is documented where it is defined. ``preset_for_tests`` (as Nomad's
``TestConfigForServer``) gives tight timings for tests; production code never
switches to it by itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import tempfile
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import platformdirs

from floydd.errors import UserError

__all__ = ["Config", "load", "default_state_dir", "socket_path_for", "preset_for_tests"]

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
    socket path gets a short, owner-only folder under the temp dir whose name is
    derived from the state dir, so daemon and clients agree without talking.
    """
    state_dir = Path(state_dir).absolute()
    path = state_dir / "floydd.sock"
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(state_dir)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"floydd-{os.getuid()}-{digest}" / "floydd.sock"


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Everything a daemon needs to know; build it with :func:`load`."""

    state_dir: Path = field(default_factory=default_state_dir)
    """Store, records, job workspaces, socket, lock and log live here."""
    node_name: str = field(default_factory=socket.gethostname)
    """Name shown in listings; defaults to the host name."""
    tcp: str = ""
    """Optional extra API listener, ``HOST:PORT``; loopback only until a cluster exists."""
    sandbox: str = "auto"
    """``auto`` (bubblewrap when it works), ``bwrap`` (required) or ``none``."""

    def __post_init__(self) -> None:
        if self.sandbox not in ("auto", "bwrap", "none"):
            raise UserError(f"sandbox {self.sandbox!r} is not one of auto, bwrap, none",
                            hint="set FLOYDD_SANDBOX or --sandbox to auto, bwrap or none")
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
    stop_grace: float = 10.0
    """Seconds a stopped or timed-out job gets after SIGTERM before SIGKILL."""
    log_level: str = "info"
    """Daemon log level: debug, info, warning, error."""
    cluster_heartbeat: float = 5.0
    """Seconds between this node's heartbeats to the cluster; a node is listed as stale
    after four missed ones."""
    job_lost_after: float = 60.0
    """Seconds without heartbeats from a node (that did not shut down cleanly) after which the
    leader declares its running jobs lost and queues its not-yet-started ones again."""

    @property
    def socket_path(self) -> Path:
        return socket_path_for(self.state_dir)

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "floydd.lock"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "floydd.log"

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
    if file is None:
        base = Path(state_dir) if state_dir else default_state_dir()
        candidate = base / CONFIG_FILE
        file = candidate if candidate.exists() else None
    if file is not None:
        values.update(_read_toml(Path(file), known))
    for name in known:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = raw
    values.update(flags)
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
        return str(value)
    except (TypeError, ValueError):
        raise UserError(f"config value {name}={value!r} is not a valid {kind}",
                        hint=f"set {ENV_PREFIX}{name.upper()} or the TOML key {name} to a {kind}") from None
