"""``floydd``: the operator's command line for the node daemon.

The verbs of other modules (``init``, ``join``, ``token``, ``audit``, ``user``, ...) are
imported when named (:class:`_Verbs`), and this module's own imports what each needs inside
it: ``floydd start`` then loads the daemon and not the client side of every other verb
(~0.5 MiB of an idle box's RSS, issue 23). ``floydd --help`` still lists every verb.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

import floydd
from floydd.cli.common import echo_json, handle_errors
from floydd.config import load
from floydd.errors import Conflict, Unavailable

if TYPE_CHECKING:
    from floydd.client import Client

__all__ = ["main", "cli"]

LAZY_VERBS = {"init": "floydd.cli.cluster:init", "token": "floydd.cli.tokens:token",
              "join": "floydd.cli.cluster:join", "members": "floydd.cli.cluster:members",
              "drain": "floydd.cli.cluster:drain", "leave": "floydd.cli.cluster:leave",
              "remove": "floydd.cli.cluster:remove", "recover": "floydd.cli.cluster:recover",
              "rotate-store-key": "floydd.cli.cluster:rotate_store_key",
              "audit": "floydd.cli.audit:make_audit", "user": "floydd.cli.people:make_user"}
"""Verb -> ``module:name`` of its command, or of the factory (``make_*``) that makes it with
this module's ``--state-dir``/``--config``/``--system`` options and its way to the daemon."""


class _Verbs(click.Group):
    """A group whose :data:`LAZY_VERBS` are imported when first named (or listed, by --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_VERBS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_VERBS and cmd_name not in self.commands:
            module, name = LAZY_VERBS[cmd_name].split(":")
            made = getattr(importlib.import_module(module), name)
            self.add_command(made(_config_options, _client) if name.startswith("make_") else made, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(floydd.__version__, prog_name="floydd")
def cli() -> None:
    """The floydd node daemon: one per box."""


def _config_options(fn):
    options = [
        click.option("--state-dir", type=click.Path(path_type=Path), default=None,
                     help="State folder (default: the user's data dir; env FLOYDD_STATE_DIR)."),
        click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
                     help="TOML config file (default: STATE_DIR/floydd.toml if present)."),
        click.option("--system", "system", is_flag=True, default=None,
                     help="The daemon installed as a service: state /var/lib/floydd, config "
                          "/etc/floydd/floydd.toml, socket /run/floydd/floydd.sock (group floyd)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@cli.command()
@_config_options
@click.option("--dev-tcp", default=None, metavar="HOST:PORT",
              help="Dev/test: also serve the API on plain loopback HTTP with one shared token (people elsewhere: floyd login).")
@click.option("--sandbox", type=click.Choice(["auto", "require", "prefer", "bwrap", "none"]), default=None,
              help="Run jobs in bubblewrap: require it, prefer it (unsandboxed, loudly, when it does not "
                   "work), or auto (require when serving others, else prefer).")
@click.option("--node-name", default=None, help="Name of this node (default: host name).")
@click.option("--dev-fake-gpus", default=None, metavar="SPEC",
              help="DEV/TEST ONLY: pretend to have GPUs, e.g. 2 or 4xA100-80GB.")
@click.option("--log-level", default=None, type=click.Choice(["debug", "info", "warning", "error"]))
@handle_errors
def start(state_dir, config_file, system, dev_tcp, sandbox, node_name, dev_fake_gpus, log_level) -> None:
    """Run the daemon in the foreground (Ctrl-C stops it; jobs keep running)."""
    from floydd.daemon.main import run
    config = load({"state_dir": state_dir, "system": system, "dev_tcp": dev_tcp, "sandbox": sandbox, "node_name": node_name,
                   "dev_fake_gpus": dev_fake_gpus, "log_level": log_level}, file=config_file)
    run(config)


def _client(state_dir, config_file, system=None) -> tuple[Client, object]:
    from floydd.client import Client
    config = load({"state_dir": state_dir, "system": system}, file=config_file)
    return Client(config.socket_path, timeout=5.0), config


@cli.command()
@_config_options
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def status(state_dir, config_file, system, as_json) -> None:
    """Is the daemon up? Its node, uptime, GPUs and jobs."""
    from floydd.present import clock_column, human_duration, skew_warnings
    client, config = _client(state_dir, config_file, system)
    info = client.info()
    nodes = client.nodes()
    if as_json:
        echo_json({"info": info, "nodes": nodes})
        return
    click.echo(f"floydd {info['version']} on {info['node']}: up {human_duration(info['uptime'])}, pid {info['pid']}")
    click.echo(f"state {info['state_dir']}  socket {info['socket']}  sandbox {info['sandbox']}")
    if info.get("sandbox_warning"):
        click.echo(f"warning: {info['sandbox_warning']}", err=True)
    for line in info.get("audit_warnings") or ():     # the audit chain's evidence (floydd.cluster.audit_guard)
        click.echo(f"warning: {line}", err=True)
    for n in nodes:
        click.echo(f"node {n['name']}  {n['role']}  {n['health']}  {n['cpus']} CPUs  {len(n['gpus'])} GPUs "
                   f"({n['gpu_source']})  running jobs: {info['running']}  {clock_column(n)}")
    for line in skew_warnings(nodes):
        click.echo(line, err=True)


@cli.command()
@_config_options
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for it to exit.")
@handle_errors
def stop(state_dir, config_file, system, timeout) -> None:
    """Stop the daemon (running jobs keep running and are picked up on the next start).

    Returns once the daemon's process has exited: its API closes first, then it tells the
    cluster it is off and leaves the voters, which takes a moment more."""
    import psutil
    client, config = _client(state_dir, config_file, system)
    pid = client.info()["pid"]
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        click.echo(f"floydd (pid {pid}) stopped")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(process):
            click.echo(f"floydd (pid {pid}) stopped")
            return
        time.sleep(0.05)
    raise Unavailable(f"floydd (pid {pid}) did not stop within {timeout:.0f}s", hint=f"kill {pid}")


def _exited(process) -> bool:
    """Whether the daemon's process is gone (or a zombie its parent has not reaped yet)."""
    import psutil
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@cli.command()
@_config_options
@click.option("--dry-run", is_flag=True, help="Only say what is damaged and what would be done; change nothing.")
@handle_errors
def repair(state_dir, config_file, system, dry_run) -> None:
    """Rebuild what can be rebuilt of damaged state files (the daemon must be stopped).

    Checks records.db, the store's catalog and key, and the cluster log (integrity_check);
    each damaged file is set aside as NAME.damaged-WHEN (never deleted) and made anew from
    what is left: readable rows, the trees in the store, the cluster's catalog, the job
    records. Says what it could not recover. Exits 1 if something is still untrusted.
    """
    from floydd.daemon.main import StateLock
    from floydd.daemon.repair import repair as run_repair
    config = load({"state_dir": state_dir, "system": system}, file=config_file)
    lock = StateLock(config)
    try:
        lock.acquire()
    except Conflict:
        raise Conflict(f"floydd is running on {config.state_dir}",
                       hint=f"stop it first (floydd stop --state-dir {config.state_dir}), then repair") from None
    try:
        report = run_repair(config, dry_run=dry_run)
    finally:
        lock.release()
    if not report.found:
        click.echo(f"nothing to repair in {config.state_dir}: every file can be trusted")
        return
    click.echo("cannot be trusted:")
    for finding in report.found:
        click.echo(f"  {finding}")
    click.echo("would do (nothing was changed):" if dry_run else "done:")
    for line in report.done:
        click.echo(f"  {line}")
    if report.lost:
        click.echo("could not be recovered:")
        for line in report.lost:
            click.echo(f"  {line}")
    if dry_run:
        click.echo(f"run `floydd repair --state-dir {config.state_dir}` to do it")
        return
    if report.left:
        for finding in report.left:
            click.echo(f"still cannot be trusted: {finding}", err=True)
        sys.exit(1)
    click.echo(f"repaired: floydd can start (floydd start --state-dir {config.state_dir})")



def main() -> None:
    cli(prog_name="floydd")


if __name__ == "__main__":
    main()
