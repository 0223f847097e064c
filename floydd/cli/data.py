"""``floyd data``: versioned, encrypted, deduplicated datasets (FloydHub's verbs)."""

from __future__ import annotations

import itertools
import sys
from datetime import datetime
from pathlib import Path

import click

from floydd.cli.common import connect, echo_json, fail, handle_errors
from floydd.cli.exchange import export_options, write_export
from floydd.cli.progress import follow_progress, transfer_bar
from floydd.model import check_upload_name
from floydd.present import human_bytes

__all__ = ["data"]


@click.group()
def data() -> None:
    """Upload, list, inspect, clone and check datasets."""


@data.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--name", required=True, help="Dataset name; each upload adds a version (name:1, name:2, ...).")
@click.option("-m", "--message", default="", help="A note recorded with the version.")
@click.option("--private/--lab", "private", default=None,
              help="private: only you (its owner) and the lab's admins mount, clone or add to it; lab: everyone "
                   "(a new dataset's default). Left out: the dataset keeps its visibility.")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def upload(path: Path, name: str, message: str, private: bool | None, as_json: bool) -> None:
    """Store the folder PATH as the next version of dataset NAME.

    Unchanged data is not stored twice; an interrupted upload run again skips
    what is already stored. In a cluster it answers once the version is kept on
    two boxes, or says how many copies it has so far (floyd data info shows them).
    """
    check_upload_name(name)                 # before the folder is read or sent
    path = path.expanduser().absolute()
    if not path.exists():
        fail(f"{path} does not exist", "give the folder to upload")
    visibility = None if private is None else "private" if private else "lab"   # None: as it is (new: lab)
    client = connect()
    if client.remote:                       # the folder goes as a tar
        with transfer_bar(f"sending {path.name}") as progress:
            events = client.upload_tar(path, name, message, progress=progress, visibility=visibility)
            first = next(events, None)          # the whole tar is sent before the first answer
        events = itertools.chain([first] if first is not None else [], events)
    else:
        events = client.upload(path, name, message, visibility)
    version = follow_progress(events, f"uploading {path.name}")
    if as_json:
        echo_json(version)
        return
    click.echo(f"{version['name']}:{version['version']}: {version['files']} files, "
               f"{human_bytes(version['size'])}   (mount it with --data {version['name']}:/input)")
    if version.get("copies_note"):
        click.echo(version["copies_note"])


@data.command(name="ls")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print exactly what the daemon returned.")
@handle_errors
def ls(name: str | None, as_json: bool) -> None:
    """List datasets and their versions (or the versions of NAME)."""
    versions = connect().datasets(name)
    if as_json:
        echo_json(versions)
        return
    if not versions:
        click.echo("no datasets yet: floyd data upload PATH --name NAME")
        return
    width = max(len(f"{v['name']}:{v['version']}") for v in versions)
    for v in versions:
        ref = f"{v['name']}:{v['version']}"
        when = datetime.fromtimestamp(v["created"]).strftime("%Y-%m-%d %H:%M")
        held = _held(v)
        click.echo(f"{ref:<{width}}  {when}  {v['files']:>7} files  {human_bytes(v['size']):>10}{held}  {v['message']}")


@data.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def info(ref: str, as_json: bool) -> None:
    """Show dataset version REF (NAME, NAME:N or NAME:latest) and its files."""
    v = connect().dataset(ref)
    if as_json:
        echo_json(v)
        return
    click.echo(f"{v['name']}:{v['version']}  {v['files']} files, {human_bytes(v['size'])}")
    click.echo(f"created  {datetime.fromtimestamp(v['created']):%Y-%m-%d %H:%M:%S}")
    click.echo(f"tree     {v['tree']}")
    click.echo(f"owner    {v.get('owner') or 'unknown'} ({_visibility(v)})")
    where = ", ".join(v["held_by"]) or "no box"
    click.echo(f"copies   {v['copies']} of {v['replicas']} on {where}: {v['copies_note']}")
    click.echo(f"sealed   {_sealed(v)}")
    if v["message"]:
        click.echo(f"message  {v['message']}")
    for e in v["entries"][:50]:
        click.echo(f"  {e['mode']:o} {human_bytes(e['size']) if e['kind'] == 'file' else e['kind']:>10}  {e['path']}")
    more = len(v["entries"]) - 50 + (1000 if v.get("truncated") else 0)
    if more > 0:
        click.echo(f"  ... and {more}{'+' if v.get('truncated') else ''} more (floyd data clone to see all)")


def _sealed(v: dict) -> str:
    """The store key epochs of the version's objects on the box that answered."""
    epochs = v.get("key_epochs")
    if epochs is None:
        return "no copy on this box to look at"
    newest = v.get("cluster_key_epoch", 0)
    if set(epochs) <= {str(newest)}:
        return f"under key epoch {newest}, the cluster's newest ({sum(epochs.values())} objects here)"
    parts = ", ".join(f"{n} under epoch {e}" for e, n in sorted(epochs.items(), key=lambda kv: int(kv[0])))
    return f"{parts} here; the cluster's newest is epoch {newest} (the rest is re-sealed in the background)"


def _visibility(v: dict) -> str:
    if v.get("visibility") == "private":
        return "private: only the owner and admins mount, clone or add to it"
    return "lab: everyone in the lab may use it"


def _held(v: dict) -> str:
    """``[on a, b]``; with fewer copies than kept, ``[1 of 2 copies: a; b silent]``."""
    if not v["held_by"]:
        return ""
    if v["copies"] >= v["replicas"] and not v["silent_holders"]:
        return f"  [on {', '.join(v['held_by'])}]"
    counted = [h for h in v["held_by"] if h not in v["silent_holders"]]
    quiet = f"; {', '.join(v['silent_holders'])} silent" if v["silent_holders"] else ""
    return f"  [{v['copies']} of {v['replicas']} copies: {', '.join(counted) or 'none'}{quiet}]"


@data.command()
@click.argument("ref")
@click.argument("dest", required=False, type=click.Path(path_type=Path))
@handle_errors
def clone(ref: str, dest: Path | None) -> None:
    """Restore dataset version REF into DEST (default ./NAME), byte-identical."""
    dest = (dest or Path(ref.partition(":")[0].replace("/", "-"))).expanduser().absolute()
    client = connect()
    if client.remote:                       # the version comes as a tar
        with transfer_bar(f"fetching {ref}") as progress:
            got = client.fetch_tar("/v1/datasets/tar", dest, query={"ref": ref}, progress=progress)
        click.echo(f"{ref} ({got.files} files) written to {dest} on this machine")
        return
    result = follow_progress(client.clone(ref, dest), f"cloning {ref}")
    click.echo(f"{result.get('name', ref)}:{result.get('version', '')} written to {dest}")


@data.command()
@click.argument("ref")
@click.option("-y", "--yes", is_flag=True, help="Do not ask.")
@handle_errors
def delete(ref: str, yes: bool) -> None:
    """Delete version NAME:N, or every version of NAME. Space returns with `floyd data gc`."""
    if not yes and sys.stdin.isatty():
        what = f"version {ref}" if ":" in ref else f"dataset {ref} and all its versions"
        click.confirm(f"delete {what}?", abort=True)
    connect().delete_dataset(ref)
    click.echo(f"deleted {ref} (run `floyd data gc` to free the space)")


@data.command()
@click.argument("name", required=False)
@click.option("--repair", is_flag=True,
              help="Fetch good copies of damaged objects from other nodes (in a cluster); say what could not be.")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def verify(name: str | None, repair: bool, as_json: bool) -> None:
    """Re-read and re-hash every stored object (or those of dataset NAME).

    Exits 1 while anything is damaged. An upload of the same data writes good copies over
    damaged ones; --repair fetches them from other nodes of the cluster.
    """
    report = follow_progress(connect().verify(name, repair=repair), "verifying")
    if as_json:
        echo_json(report)
    damaged = report.get("damaged") or []
    if not as_json:
        click.echo(f"checked {report.get('objects', 0)} objects, {human_bytes(report.get('bytes', 0))}")
        for item in report.get("repaired") or []:
            click.echo(f"REPAIRED {item['object']} (a good copy from another node)")
        for item in damaged:
            users = ", ".join(item.get("versions") or []) or "no dataset version"
            click.echo(f"DAMAGED {item['object']}: {item.get('error', 'failed verification')} (used by {users})")
            if item.get("repair"):
                click.echo(f"  not repaired: {item['repair']}")
        if damaged and not repair:
            click.echo("  hint: floyd data verify --repair fetches good copies from other nodes; uploading the "
                       "same data again writes good copies too", err=True)
    if damaged:
        sys.exit(1)


@data.command(name="export")
@click.argument("refs", nargs=-1, required=True)
@export_options
@handle_errors
def export(refs: tuple[str, ...], dest: Path, key_file: Path | None, passphrase: bool, force: bool,
           as_json: bool) -> None:
    """Write dataset versions REFS (NAME, NAME:N) to one signed, sealed file for another site.

    `floyd import FILE` there adds each as the next version of its name.
    """
    write_export(jobs=[], datasets=list(refs), dest=dest, key_file=key_file, passphrase=passphrase, force=force,
                 as_json=as_json)


@data.command()
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def gc(as_json: bool) -> None:
    """Remove stored objects that no dataset version or running upload needs."""
    report = connect().gc()
    if as_json:
        echo_json(report)
        return
    click.echo(f"removed {report.get('removed', 0)} objects, freed {human_bytes(report.get('freed', 0))}")
