"""What every CLI command shares: finding (or starting) the daemon, errors, output."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from floydd.cli import exits
from floydd.client import Client
from floydd.config import default_state_dir, socket_path_for
from floydd.errors import FloyddError, Unavailable
from floydd.security.owned_dirs import claim_state_dir, open_private_file
from floydd.system import SERVICE_DOWN, SERVICE_DOWN_HINT, discover, system_paths

__all__ = ["STALE", "pass_where", "connect", "handle_errors", "new_file", "echo_json", "fail", "human_bytes", "human_duration", "SYSTEM_STATE_DIR"]

SYSTEM_STATE_DIR = Path("/var/lib/floydd")
"""Where a daemon installed as a system service keeps its state (:mod:`floydd.system`)."""
_AUTOSTART_TIMEOUT = 30.0

STALE = click.option("--stale", is_flag=True,
                     help="In a cluster, read this box's copy as it is instead of catching up with the leader "
                          "first (works without a quorum).")
"""``--stale`` on the listings read through the leader (ReadIndex) unless it is given."""


def pass_where(config_options: Callable[[Callable], Callable]) -> Callable[[Callable], Callable]:
    """For the verbs of a ``floydd`` group whose daemon options (``--state-dir``, ``--config``,
    ``--system``: ``config_options``) the group takes: the verb takes them too, either place
    working (``floydd user add NAME --state-dir D``), and gets ``(state_dir, config_file,
    system)`` first, the verb's over the group's (``ctx.obj``)."""
    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        @click.pass_obj
        def verb(where, *args, state_dir=None, config_file=None, system=None, **kw):
            group = where or (None, None, None)
            return fn((state_dir or group[0], config_file or group[1], system or group[2]), *args, **kw)
        return config_options(verb)
    return decorate


def connect(*, autostart: bool = True) -> Client:
    """The daemon to talk to: FLOYD_HOST (the dev TCP port), an explicit FLOYDD_STATE_DIR's,
    the box ``floyd login`` saved (TLS, :mod:`floydd.cli.login`), the user's socket, the system
    socket, or a new one (:func:`floydd.system.discover`).

    Only when none answers does it start a single-node daemon in the background
    (state under the user's data dir, log there), and says so once on stderr; never on a box
    whose system service is installed but stopped: there it says the service is down.
    """
    host = os.environ.get("FLOYD_HOST")
    if host:
        return Client(address=host, token=os.environ.get("FLOYD_TOKEN"))
    explicit = os.environ.get("FLOYDD_STATE_DIR")
    if not explicit:
        from floydd.cli.login import saved_login
        login = saved_login()
        if login is not None:
            return login.client()
    state_dir = Path(explicit).expanduser().absolute() if explicit else default_state_dir()
    client = Client(socket_path_for(state_dir), log_path=state_dir / "floydd.log")
    paths = system_paths()
    system = Client(paths.socket_path, log_path=paths.state_dir / "floydd.log")
    clients = {client.socket_path: client, system.socket_path: system}
    found = discover(os.environ, client.socket_path, paths, answers=lambda sock: clients[sock].ping())
    if found.kind in ("user", "system"):
        return clients[Path(found.where)]
    if found.kind == "down":
        raise Unavailable(SERVICE_DOWN, hint=SERVICE_DOWN_HINT)
    if not autostart:
        raise Unavailable(f"no floydd daemon answers at {client.where}", hint="start one with `floydd start`")
    _start_background(state_dir, client)
    return client


def _start_background(state_dir: Path, client: Client) -> None:
    claim_state_dir(state_dir)          # a state dir another user made first is refused
    log_path = state_dir / "floydd.log"
    # never through a link someone planted: the daemon's output would go where it points
    with os.fdopen(open_private_file(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state_dir)],
                                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + _AUTOSTART_TIMEOUT
    while time.monotonic() < deadline:
        if client.ping():
            click.echo(f"floyd: started a single-node floydd in the background (state {state_dir}, "
                       f"log {log_path}); stop it with `floydd stop`", err=True)
            return
        if proc.poll() is not None and not client.ping():
            if client.ping():  # another floyd started one at the same moment
                return
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise Unavailable("the background floydd exited at start: " + (" / ".join(tail) or "no output"),
                              hint=f"see {log_path}; or run `floydd start` in a terminal to watch it")
        time.sleep(0.05)
    raise Unavailable(f"the background floydd did not answer within {_AUTOSTART_TIMEOUT:.0f}s",
                      hint=f"see {log_path}")


def handle_errors(fn: Callable) -> Callable:
    """Turn FloyddError into 'error: message' + hint on stderr and exit 1; never a traceback
    (the codes: :mod:`floydd.cli.exits`)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FloyddError as exc:
            fail(exc.message, exc.hint)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(exits.INTERRUPTED)
        except BrokenPipeError:
            sys.exit(0)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except Exception as exc:
            if os.environ.get("FLOYD_DEBUG"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc}",
                 "this is a bug in floyd; run again with FLOYD_DEBUG=1 for the traceback and report it")
    return wrapper


def fail(message: str, hint: str = "", code: int = exits.ERROR) -> None:
    """Say what went wrong (one line) and what to do, on stderr; exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"  hint: {hint}", err=True)
    sys.exit(code)


def new_file(dest: Path, *, force: bool = False, what: str = "the file") -> Path:
    """``dest`` (absolute) for a file a command is about to write, refused plainly when it
    exists (unless ``force``) or its folder does not."""
    dest = dest.expanduser().absolute()
    if dest.exists() and not force:
        fail(f"{dest} exists", "choose another file, or pass --force to replace it")
    if not dest.parent.is_dir():
        fail(f"{dest.parent} is not a folder", f"write {what} into an existing folder")
    return dest


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
