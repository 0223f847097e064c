"""What every CLI command shares: the daemon to talk to (:func:`floydd.reach.connect`), errors, output;
and what the box's own verbs (``floydd init``, ``token``, ``join`` ...) share: ``--state-dir`` and
``--system`` (:func:`state_option`), this box's config and daemon, durations and times as said."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from floydd.cli import exits
from floydd.client import Client
from floydd.config import Config, load
from floydd.errors import FloyddError, InvalidSpec
from floydd.reach import connect

__all__ = ["STALE", "pass_where", "connect", "handle_errors", "new_file", "echo_json", "fail", "SYSTEM_STATE_DIR",
           "state_option", "box_config", "box_client", "parse_ttl", "format_when"]

SYSTEM_STATE_DIR = Path("/var/lib/floydd")
"""Where a daemon installed as a system service keeps its state (:mod:`floydd.system`)."""
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


# -- the box's own verbs (floydd init, token, join, members ...) ------------------------------


def state_option(fn):
    """``--state-dir`` and ``--system`` on a verb: the verb gets ``state_dir`` (``--system``
    sets ``FLOYDD_SYSTEM=1`` for :func:`box_config`)."""
    fn = click.option("--system", is_flag=True, expose_value=False, callback=_system_mode,
                      help="The daemon installed as a service (state /var/lib/floydd; env FLOYDD_SYSTEM=1).")(fn)
    return click.option("--state-dir", type=click.Path(path_type=Path), default=None,
                        help="State folder (default: the user's data dir; env FLOYDD_STATE_DIR).")(fn)


def _system_mode(ctx, param, value) -> None:
    """``--system``: as ``FLOYDD_SYSTEM=1``, which :func:`floydd.config.load` reads (this
    process's own environment: one command)."""
    if value:
        os.environ["FLOYDD_SYSTEM"] = "1"


def box_config(state_dir) -> Config:
    """This box's config, for ``--state-dir`` (None: the default)."""
    return load({"state_dir": state_dir})


def box_client(config) -> Client:
    """A client of this box's daemon, on its socket."""
    return Client(config.socket_path, timeout=30.0)


def parse_ttl(text: str) -> float:
    """Seconds in ``3600``, ``30m``, ``24h``, ``7d`` (``--ttl``, ``--timeout``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not m:
        raise InvalidSpec(f"--ttl {text!r} is not a duration", hint="e.g. 3600, 30m, 24h or 7d")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def format_when(ts: float | None, shape: str = "%Y-%m-%d %H:%M") -> str:
    """``ts`` in local time, ``-`` for None."""
    return "-" if ts is None else time.strftime(shape, time.localtime(ts))
