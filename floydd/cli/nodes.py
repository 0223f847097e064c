"""``floyd nodes``: the machines of the cluster, their CPUs, GPUs and who uses them."""

from __future__ import annotations

import click

from floydd.cli.common import STALE, connect, echo_json, handle_errors
from floydd.present import clock_column, human_bytes, skew_warnings

__all__ = ["nodes"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print exactly what the daemon returned.")
@STALE
@handle_errors
def nodes(as_json: bool, stale: bool) -> None:
    """Every node with its role, health, CPUs, memory, disk and GPUs."""
    listing = connect().nodes(stale=stale)
    if as_json:
        echo_json(listing)
        return
    for n in listing:
        click.echo(f"{n['name']}  {n['role']}  {n['health']}  {n['cpus']} CPUs ({n['cpu_percent']:.0f}% busy)  "
                   f"RAM {human_bytes(n['memory_total'] - n['memory_available'])}/{human_bytes(n['memory_total'])}  "
                   f"disk free {human_bytes(n['disk_free'])}/{human_bytes(n['disk_total'])}  {clock_column(n)}")
        if n.get("store_why"):
            click.echo(f"  {n['store_why']}: no new copies or jobs go here until it recovers")
        if not n["gpus"]:
            click.echo(f"  no GPUs ({n['gpu_source']})")
        for g in n["gpus"]:
            util = "-" if g["utilization"] is None else f"{g['utilization']}%"
            temp = "-" if g["temperature"] is None else f"{g['temperature']}°C"
            power = "-" if g["power_w"] is None else f"{g['power_w']:.0f} W"
            click.echo(f"  GPU {g['index']}  {g['name']}  mem {human_bytes(g['memory_used'])}/"
                       f"{human_bytes(g['memory_total'])}  util {util}  {temp}  {power}  "
                       f"{_holder(g)}")
    for line in skew_warnings(listing):
        click.echo(line, err=True)


def _holder(gpu: dict) -> str:
    """Who holds a GPU: ``proj/3 (alice)``, ``proj/3`` where the owner is unknown, or ``free``."""
    job = gpu.get("job")
    if not job:
        return "free"
    return f"{job} ({gpu['user']})" if gpu.get("user") else job
