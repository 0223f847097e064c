"""``floyd run`` and ``floyd restart``: FloydHub's flags, validated before anything is sent."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import click

from floydd.answers import decode_job
from floydd.cli.common import connect, echo_json, handle_errors
from floydd.cli.policy import restart_options
from floydd.cli.jobs import follow_to_end
from floydd.cli.progress import transfer_bar
from floydd.cli.project import find_project, job_key
from floydd.errors import FloyddError, InvalidSpec, Unavailable
from floydd.cli.resources import CPU_HELP, MEMORY_HELP, OptionalCounts, resource_fields
from floydd.model import check_gang_command, check_max_runtime, check_mounts, check_params


if TYPE_CHECKING:
    from floydd.model import JobView

__all__ = ["run", "restart"]

_UPLOAD_LIMIT = 1 << 30
"""Stop packing a code folder past 1 GiB (the daemon refuses above its own, smaller limit)."""


@click.command(cls=OptionalCounts, context_settings={"allow_interspersed_args": False})
@click.option("--gpu", "gpu", type=int, default=None, metavar="[N]", help="Run on N GPUs per box (alone: 1).")
@click.option("--cpu", "cpu", default=None, metavar="[N]", help=CPU_HELP)
@click.option("--memory", default=None, metavar="SIZE", help=MEMORY_HELP)
@click.option("--nodes", type=int, default=1, show_default=True, metavar="N",
              help="Spread the job over N boxes under torchrun (distributed training; --gpu is per box).")
@click.option("--data", "data", multiple=True, metavar="NAME[:VER]:MOUNT",
              help="Mount a dataset version read-only, e.g. mnist:/input or digits/2/output:/model. Repeatable.")
@click.option("--env", default="default", show_default=True, help="Environment to run in.")
@click.option("-m", "--message", default="", help="A note recorded with the job.")
@click.option("-f", "--follow", is_flag=True,
              help="Stream the logs until the job ends, then exit with its exit code (floyd --help lists them).")
@click.option("--max-runtime", type=float, default=None, metavar="SECONDS",
              help="Stop the job after this long (more than 0, at most 30 days).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Recorded with the job and passed to it as an environment variable. Repeatable.")
@click.option("--mode", default="job", show_default=True, type=click.Choice(["job"]), help="Run mode.")
@click.option("--json", "as_json", is_flag=True, help="Print the submitted job as JSON.")
@click.argument("command", nargs=-1, required=False)
@restart_options
@handle_errors
def run(gpu, cpu, memory, nodes, data, env, message, follow, max_runtime, params, mode, as_json, command,
        policy) -> None:
    """Run COMMAND on the cluster with a snapshot of this project's code.

    \b
    floyd run "python train.py"
    floyd run --gpu --data mnist:/input --param lr=0.01 -f "python train.py"
    floyd run --nodes 2 --gpu 4 "python train.py"   # torchrun over 2 boxes, 4 GPUs each
    floyd run --cpu 8 --memory 32G "python prep.py"  # 8 cores and 32 GiB set aside
    """
    text = " ".join(command).strip()
    if not text:
        raise InvalidSpec("the command is empty", hint='floyd run "python train.py"')
    resources = resource_fields(gpu, cpu, memory, nodes)
    check_max_runtime(max_runtime)
    if nodes > 1:
        check_gang_command(text)
    mounts = check_mounts(list(data))
    parsed = check_params(list(params))
    project, folder = find_project()
    client = connect()
    body = {"project": project, "command": text, **resources, "data": [f"{m.ref}:{m.mount}" for m in mounts],
            "env": env, "message": message, "max_runtime": max_runtime, "params": parsed, "mode": mode,
            "idem_key": uuid.uuid4().hex, **policy}
    if client.remote:
        _check_first(client, body)
    job = _announce(_submit(client, {**body, **_code(client, folder)}), as_json)
    if follow:
        follow_to_end(client, job.id)


@click.command(cls=OptionalCounts)
@click.argument("job")
@click.option("--gpu", "gpu", type=int, default=None, metavar="[N]", help="Change the GPU count.")
@click.option("--cpu", "cpu", default=None, metavar="[N]",
              help="Alone: run on CPU this time. With N: set N cores aside on each box (and as many "
                   "maths threads: OMP_NUM_THREADS).")
@click.option("--memory", default=None, metavar="SIZE", help="Change the memory set aside on each box (e.g. 16G).")
@click.option("--nodes", type=int, default=None, metavar="N", help="Change the number of boxes.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="Override a parameter.")
@click.option("--command", "command", default=None, help="Run another command with the same code.")
@click.option("-m", "--message", default=None)
@click.option("--max-runtime", type=float, default=None, metavar="SECONDS",
              help="Change the time limit (more than 0, at most 30 days).")
@click.option("-f", "--follow", is_flag=True,
              help="Stream the logs until the job ends, then exit with its exit code (floyd --help lists them).")
@click.option("--json", "as_json", is_flag=True)
@restart_options
@handle_errors
def restart(job, gpu, cpu, memory, nodes, params, command, message, max_runtime, follow, as_json, policy) -> None:
    """Run JOB again with the same code, data and params, with overrides."""
    check_max_runtime(max_runtime)
    overrides: dict = resource_fields(gpu, cpu, memory, nodes, restart=True)
    if params:
        overrides["params"] = check_params(list(params))
    for key, value in (("command", command), ("message", message), ("max_runtime", max_runtime)):
        if value is not None:
            overrides[key] = value
    client = connect()
    new = _announce(client.restart(job_key(job), {**overrides, **policy}), as_json)
    if follow:
        follow_to_end(client, new.id)


def _code(client, folder) -> dict:
    """How the daemon gets the code: its path when the daemon shares this machine (it
    snapshots the folder itself), else the folder sent as a tar (FLOYD_HOST)."""
    if not client.remote:
        return {"code_path": str(folder)}
    click.echo(f"sending the code of {folder} to {client.where} ...", err=True)
    with transfer_bar("sending code") as progress:
        sent = client.upload_code(folder, limit=_UPLOAD_LIMIT, progress=progress)
    click.echo(f"  {sent['files']} files, {sent['bytes'] / 2**20:.1f} MiB", err=True)
    if "code_upload" not in sent:           # a daemon of 0.2 answers the tree it made, and takes it back
        return {"code_tree": sent["code_tree"]}
    return {"code_upload": sent["code_upload"]}


def _check_first(client, body: dict) -> None:
    """Ask a daemon on another machine whether it would take the job before sending it the code,
    so a job it refuses (data the caller may not mount, GPUs no box has) costs no upload. A
    daemon older than the check (0.1) answers 404: the submit then checks, after the upload."""
    try:
        client.check_job(body)
    except FloyddError as exc:
        if exc.code not in ("http_404", "http_405"):
            raise


def _submit(client, body: dict, attempts: int = 3) -> dict:
    """Submit; after a timeout or a lost leader try again with the same idempotency key, so
    the cluster makes the job at most once."""
    for attempt in range(attempts):
        try:
            return client.submit(body)
        except Unavailable as exc:
            if attempt == attempts - 1:
                raise
            click.echo(f"{exc.message}; trying again ({attempt + 2}/{attempts})", err=True)
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def _announce(answer: dict, as_json: bool) -> JobView:
    """Say what the daemon made of the job (``--json``: its answer as sent); the job, decoded."""
    job = decode_job(answer)
    for warning in job.warnings:   # e.g. jobs on this box run without a sandbox
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        echo_json(answer)
        return job
    asked = job.resources.asked()
    nodes, where = asked.nodes, asked.describe()
    if nodes > 1:
        where = f"{nodes} nodes, {where} each, under torchrun"
    click.echo(f"job {job.id} submitted ({where}, env {job.env})")
    for mount in job.data:
        click.echo(f"  {mount.ref} mounted at {mount.mount}")
    click.echo(f"  floyd logs -f {job.id}    floyd status    floyd info {job.id}")
    return job
