"""``floydd``: the operator's command line for the node daemon."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import click

import floydd
from floydd.cli import cluster
from floydd.cli.common import echo_json, handle_errors, human_duration
from floydd.client import Client
from floydd.config import load
from floydd.errors import Unavailable

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(floydd.__version__, prog_name="floydd")
def cli() -> None:
    """The floydd node daemon: one per box."""


def _config_options(fn):
    options = [
        click.option("--state-dir", type=click.Path(path_type=Path), default=None,
                     help="State folder (default: the user's data dir; env FLOYDD_STATE_DIR)."),
        click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
                     help="TOML config file (default: STATE_DIR/floydd.toml if present)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@cli.command()
@_config_options
@click.option("--tcp", default=None, metavar="HOST:PORT", help="Also serve the API on loopback TCP (token needed).")
@click.option("--sandbox", type=click.Choice(["auto", "bwrap", "none"]), default=None,
              help="Run jobs in bubblewrap (auto: when it works).")
@click.option("--node-name", default=None, help="Name of this node (default: host name).")
@click.option("--dev-fake-gpus", default=None, metavar="SPEC",
              help="DEV/TEST ONLY: pretend to have GPUs, e.g. 2 or 4xA100-80GB.")
@click.option("--log-level", default=None, type=click.Choice(["debug", "info", "warning", "error"]))
@handle_errors
def start(state_dir, config_file, tcp, sandbox, node_name, dev_fake_gpus, log_level) -> None:
    """Run the daemon in the foreground (Ctrl-C stops it; jobs keep running)."""
    from floydd.daemon.main import run
    config = load({"state_dir": state_dir, "tcp": tcp, "sandbox": sandbox, "node_name": node_name,
                   "dev_fake_gpus": dev_fake_gpus, "log_level": log_level}, file=config_file)
    run(config)


def _client(state_dir, config_file) -> tuple[Client, object]:
    config = load({"state_dir": state_dir}, file=config_file)
    return Client(config.socket_path, timeout=5.0), config


@cli.command()
@_config_options
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def status(state_dir, config_file, as_json) -> None:
    """Is the daemon up? Its node, uptime, GPUs and jobs."""
    client, config = _client(state_dir, config_file)
    info = client.info()
    nodes = client.nodes()
    if as_json:
        echo_json({"info": info, "nodes": nodes})
        return
    click.echo(f"floydd {info['version']} on {info['node']}: up {human_duration(info['uptime'])}, pid {info['pid']}")
    click.echo(f"state {info['state_dir']}  socket {info['socket']}  sandbox {info['sandbox']}")
    for n in nodes:
        click.echo(f"node {n['name']}  {n['role']}  {n['health']}  {n['cpus']} CPUs  {len(n['gpus'])} GPUs "
                   f"({n['gpu_source']})  running jobs: {info['running']}")


@cli.command()
@_config_options
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for it to exit.")
@handle_errors
def stop(state_dir, config_file, timeout) -> None:
    """Stop the daemon (running jobs keep running and are picked up on the next start)."""
    client, config = _client(state_dir, config_file)
    pid = client.info()["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.ping():
            click.echo(f"floydd (pid {pid}) stopped")
            return
        time.sleep(0.05)
    raise Unavailable(f"floydd (pid {pid}) did not stop within {timeout:.0f}s", hint=f"kill {pid}")


for _command in (cluster.init, cluster.token, cluster.join, cluster.members, cluster.leave, cluster.recover):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="floydd")


if __name__ == "__main__":
    main()
