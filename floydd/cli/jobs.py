"""Job verbs: status, info, logs, stop, output, clone, delete, compare."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING
from datetime import datetime
from pathlib import Path

import click

from floydd.cli import exits
from floydd.cli.common import STALE, connect, echo_json, fail, handle_errors
from floydd.cli.policy import describe_policy
from floydd.cli.progress import follow_progress, transfer_bar
from floydd.cli.table import cut, print_table
from floydd.cli.project import find_project, job_key
from floydd.answers import decode_job, decode_jobs
from floydd.client import Client
from floydd.errors import FloyddError, UserError
from floydd.model import FINAL_STATES, SORTS, JobOrder, filter_text
from floydd.present import human_duration

if TYPE_CHECKING:
    from floydd.model import JobView, MetricView, ResourcesView

__all__ = ["status", "info", "logs", "stop", "output", "clone", "delete", "compare", "follow_logs", "follow_to_end"]


def _outage_text(job: JobView) -> str:
    """`` (box out of touch 40s)`` for an unknown job, `` (run 2)`` for a rerun; else ""."""
    if job.state == "unknown" and job.unknown_since:
        return f" (box out of touch {max(0, time.time() - job.unknown_since):.0f}s)"
    return f" (run {job.reruns + 1})" if job.reruns and job.state not in ("queued",) else ""


def _output_text(job: JobView) -> str:
    """The /output version, or that the job saved nothing (``""``: /output was empty)."""
    return job.output_version or ("none: /output was empty" if job.output_version == "" else "-")


def _duration(job: JobView) -> str:
    if not job.started:
        return "-"
    return human_duration((job.ended or time.time()) - job.started)


def _metrics_text(metrics: dict[str, MetricView], limit: int = 3) -> str:
    return "  ".join(f"{k}={_num(v.last)}" for k, v in list(metrics.items())[:limit]) or "-"


def _num(v) -> str:
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


DEFAULT_LIMIT = 20
"""Jobs ``floyd status`` lists without --limit, --since or --all: the newest."""
_STATE_WIDTH = 60


@click.command()
@click.argument("job", required=False)
@click.option("--all", "all_jobs", is_flag=True,
              help="Every job of every project, archived ones too (all of them unless --limit).")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
              help=f"At most N jobs, the newest first (default {DEFAULT_LIMIT}; without a limit "
                   "with --all or --since).")
@click.option("--page", type=click.IntRange(min=1), default=1, metavar="P",
              help="The P-th page of N jobs: --page 2 lists the next older ones.")
@click.option("--since", metavar="WHEN",
              help="Jobs created since WHEN: a time ago (30m, 2h, 3d, 1w) or a date (2024-05-01, "
                   "'2024-05-01 14:30').")
@click.option("--user", "owner", metavar="NAME", help="Only the jobs NAME submitted (a person of the lab).")
@click.option("--mine", is_flag=True, help="Only the jobs you submitted.")
@click.option("--sort", "sort", metavar="KEY",
              help=f"Sort by KEY ({', '.join(SORTS)}), -KEY for descending (default -created: newest first).")
@click.option("--filter", "text", metavar="TEXT",
              help="Only the jobs whose id, state, owner, node, command or params hold TEXT (case aside).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly what the daemon returned.")
@STALE
@handle_errors
def status(job, all_jobs, limit, page, since, owner, mine, sort, text, as_json, stale) -> None:
    """This project's newest jobs (state, owner, duration, GPUs, latest metrics), or one JOB."""
    client = connect()
    if mine and owner:
        fail("--mine and --user say the same thing twice", "give one: --mine, or --user NAME")
    order, text = JobOrder.parse(sort), filter_text(text)     # refused here, before the daemon is asked
    if mine:
        owner = client.whoami()["person"]
    if job:
        answer = [client.job(job_key(job))]
    else:
        project = None
        if not all_jobs:
            try:
                project = find_project()[0]
            except UserError:
                project = None
        if limit is None and not all_jobs and since is None:
            limit = DEFAULT_LIMIT
        if page > 1 and limit is None:
            fail("--page needs a page size", "add --limit N, e.g. floyd status --all --limit 100 --page 2")
        ask = None if limit is None else limit + (0 if as_json else 1)   # one more: are there older ones?
        answer = client.jobs(project, stale=stale, limit=ask, offset=(page - 1) * (limit or 0),
                             since=None if since is None else since_time(since), user=owner,
                             sort=None if order.newest_first else str(order), q=text or None)
    if as_json:
        echo_json(answer[:limit])
        return
    jobs = decode_jobs(answer)
    more = limit is not None and len(jobs) > limit
    jobs = jobs[:limit]
    if not jobs:
        click.echo("no jobs yet: floyd run \"python train.py\"" if page == 1 and since is None and not job
                   and not owner and not text else "no jobs match")
        return
    print_table(*_status_table(jobs))
    if more:
        first = "the newest" if order.newest_first else "the first"
        click.echo(f"{first if page == 1 else 'page ' + str(page) + ':'} {len(jobs)} shown; "
                   f"{'older' if order.newest_first else 'more'} ones: "
                   f"floyd status --page {page + 1}" + ("" if all_jobs else " (--all: every project, every job)")
                   + ", --limit N, --since 2d", err=True)


def _status_table(jobs: list[JobView]) -> tuple[list[str], list[list[str]]]:
    rows = []
    ran_on = {n for j in jobs for n in [j.node] + [p.node for p in j.parts] if n}
    many_nodes = len(ran_on) > 1                # a cluster: say where each ran
    for j in jobs:
        state = j.state + (f" ({j.waiting_for})" if j.state == "queued" and j.waiting_for else "")
        state = cut(state + _outage_text(j), _STATE_WIDTH)       # the whole reason: floyd info JOB
        gpus = ",".join(str(g) for g in j.gpus) or ("cpu" if not j.resources.gpus else "-")
        where = [(j.node or "-") + (f" +{len(j.parts) - 1}" if len(j.parts) > 1 else "")] if many_nodes else []
        rows.append([j.id, state, j.user or "-", *where, _duration(j), gpus, _metrics_text(j.metrics), j.message])
    return ["JOB", "STATE", "OWNER", *(["NODE"] if many_nodes else []), "DURATION", "GPUS", "METRICS", "MESSAGE"], rows


_AGO = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_time(text: str, now: float | None = None) -> float:
    """``--since``: ``30m``, ``2h``, ``3d``, ``1w`` ago, or a local date/time -> unix seconds."""
    text = text.strip()
    now = time.time() if now is None else now
    unit = text[-1:].lower()
    if unit in _AGO and text[:-1].replace(".", "", 1).isdigit():
        return now - float(text[:-1]) * _AGO[unit]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UserError(f"--since {text[:40]!r} is neither a time ago nor a date",
                        hint="--since 2h (or 30m, 3d, 1w, or a date: --since 2024-05-01)") from None


@click.command()
@click.argument("job")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def info(job, as_json) -> None:
    """Everything recorded about JOB."""
    answer = connect().job(job_key(job))
    if as_json:
        echo_json(answer)
        return
    j = decode_job(answer)
    when = lambda t: datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"  # noqa: E731
    lines = [
        ("job", j.id), ("state", j.state + (f": {j.reason}" if j.reason else "")),
        ("command", j.command), ("message", j.message or "-"),
        ("resources", _resources_text(j.resources)),
        ("gpus", ",".join(map(str, j.gpus)) or "-"), ("env", j.env),
        ("node", j.node or "-"), ("user", j.user or "-"),
        ("code", j.code_tree or "-"),
        ("created", when(j.created)), ("started", when(j.started)), ("ended", when(j.ended)),
        ("duration", _duration(j)), ("exit code", _num(j.exit_code)),
        ("output", _output_text(j)),
    ]
    if j.archived:
        lines.append(("archived", "yes: out of the cluster's hot state (its box keeps its log, metrics, events)"))
    if j.imported:
        lines.append(("imported", _imported_text(j.imported)))
    if j.state == "queued" and j.waiting_for:
        lines.insert(2, ("waiting", j.waiting_for))
    if not j.history:
        lines.insert(2, ("restart", describe_policy(j)))
    if j.state == "unknown":
        lines.insert(2, ("out of touch", f"since {when(j.unknown_since)}: the run may go on; "
                                         "it is lost past the lost-after window"))
    if j.endpoint:
        lines.insert(lines.index(("node", j.node or "-")) + 1, ("rendezvous", j.endpoint))
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        click.echo(f"{k:<{width}}  {v}")
    for warning in j.warnings:
        click.echo(f"warning: {warning}", err=True)
    if j.parts:
        click.echo("parts:")
        for p in j.parts:
            gpus = ",".join(map(str, p.gpus)) or "cpu"
            ended = (f", exit code {p.exit_code}" if p.exit_code is not None else "") + \
                (f": {p.reason}" if p.reason else "")
            click.echo(f"  rank {p.rank} on {p.node} (GPUs {gpus}): {p.state}{ended}")
    for title, items in (("params", j.params), ):
        if items:
            click.echo(f"{title}:")
            for k, v in items.items():
                click.echo(f"  {k} = {v}")
    if j.data:
        click.echo("data:")
        for d in j.data:
            click.echo(f"  {d.ref} at {d.mount}")
    if j.metrics:
        click.echo("metrics:")
        for name, m in j.metrics.items():
            click.echo(f"  {name}: last {_num(m.last)} (step {_num(m.last_step)}), "
                       f"min {_num(m.min)}, max {_num(m.max)}, {m.count} points")
    if j.events:
        click.echo("events:")
        for e in j.events[-20:]:  # in a cluster: the cluster's decisions and the box's own, in time order
            click.echo(f"  {when(e.ts)}  {e.message}")
        if len(j.events) > 20:
            click.echo(f"  ({len(j.events) - 20} earlier events: floyd info {j.id} --json)")


def _imported_text(note: dict) -> str:
    """Where an imported job comes from (``floyd import``): its id there, the origin, who sent it."""
    origin = note.get("origin") or ""
    kind = "cluster" if note.get("origin_kind") == "cluster" else "box"
    when = datetime.fromtimestamp(note["exported"]).strftime("%Y-%m-%d %H:%M") if note.get("exported") else "?"
    return (f"from {kind} {note.get('origin_name') or '?'} (sha256:{origin.removeprefix('box:')[:16]}), where it "
            f"was {note.get('job', '?')}, run by {note.get('user') or '?'} on {note.get('ran_on') or '?'}; "
            f"exported by {note.get('exported_by') or '?'} on {when}")


def _resources_text(resources: ResourcesView) -> str:
    gpus, nodes = resources.gpus, resources.nodes or 1
    text = f"{gpus} GPU(s)" if gpus else "CPU"
    return f"{nodes} nodes under torchrun, {text} each" if nodes > 1 else text


def follow_logs(client: Client, key: str, *, timestamps: bool, follow: bool = True, rank: int | None = None,
                attempt: int | None = None) -> None:
    """Print the job's output (the text of each log line); a log that stops before its end
    raises (the daemon went away, or said why)."""
    out = sys.stdout
    for raw in client.logs(key, follow=follow, rank=rank, attempt=attempt):
        line = raw.decode(errors="replace")
        ts, _, rest = line.partition(" ")
        _stream, _, text = rest.partition(" ")
        if timestamps:
            try:
                stamp = datetime.fromtimestamp(float(ts)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            except ValueError:
                stamp = ts
            out.write(f"{stamp} {text}")
        else:
            out.write(text)
        if not text.endswith("\n"):
            out.write("\n")
        out.flush()


def follow_to_end(client: Client, key: str) -> None:
    """``floyd run -f``: print the job's output until it ends, say how it ended, and exit with
    its code (:func:`floydd.cli.exits.of_job`); losing track of it exits
    :data:`~floydd.cli.exits.NOT_FOLLOWED`, Ctrl-C leaves it running."""
    try:
        follow_logs(client, key, timestamps=False)
        job = decode_job(client.wait(key))
    except FloyddError as exc:
        fail(exc.message, f"{exc.hint + '; ' if exc.hint else ''}the job may still be running: floyd status {key}",
             code=exits.NOT_FOLLOWED)
    except KeyboardInterrupt:
        click.echo(f"interrupted: job {key} keeps running (floyd logs -f {key}; floyd stop {key})", err=True)
        sys.exit(exits.INTERRUPTED)
    _print_final(job)
    sys.exit(exits.of_job(job))


def _print_final(job: JobView) -> None:
    reason = f": {job.reason}" if job.reason else ""
    click.echo(f"job {job.id} {job.state}{reason}", err=True)
    if job.metrics:
        click.echo("  " + _metrics_text(job.metrics, limit=10), err=True)
    if job.output_version:
        click.echo(f"  output: {job.output_version}   (floyd output {job.id})", err=True)
    elif job.output_version == "":
        click.echo("  output: none, /output was empty", err=True)


@click.command()
@click.argument("job")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its time.")
@click.option("--rank", type=click.IntRange(min=0), default=None, metavar="R",
              help="A distributed job's part R (default 0; floyd info lists the parts).")
@click.option("--attempt", type=click.IntRange(min=1), default=None, metavar="K",
              help="An earlier attempt's log, kept on the box that ran it (default: the latest attempt).")
@handle_errors
def logs(job, follow, timestamps, rank, attempt) -> None:
    """Print the output of JOB (stdout and stderr) of its latest attempt, or of attempt K."""
    follow_logs(connect(), job_key(job), timestamps=timestamps, follow=follow, rank=rank, attempt=attempt)


@click.command()
@click.argument("job")
@handle_errors
def stop(job) -> None:
    """Stop a queued or running JOB."""
    stopped = decode_job(connect().stop(job_key(job)))
    click.echo(f"job {stopped.id}: {stopped.state}" + (" (stopping)" if stopped.state not in FINAL_STATES else ""))


def _restore_command(name: str, what: str, tree: str, fetch: str, help: str):
    """``floyd output`` and ``floyd clone``: restore a tree of JOB into DEST."""
    @click.command(name=name, help=f"{help} (default DEST: ./PROJECT-N-{what}).")
    @click.argument("job")
    @click.argument("dest", required=False, type=click.Path(path_type=Path))
    @handle_errors
    def command(job, dest) -> None:
        key = job_key(job)
        dest = (dest or Path(f"{key.replace('/', '-')}-{what}")).absolute()
        client = connect()
        if client.remote:                   # its files come here as a tar
            with transfer_bar(f"{what} of {key}") as progress:
                got = client.fetch_tar(f"/v1/jobs/{key}/{tree}.tar", dest, progress=progress)
            click.echo(f"{what} of {key} ({got.files} files) written to {dest} on this machine")
            return
        follow_progress(getattr(client, fetch)(key, dest), f"{what} of {key}")
        click.echo(f"{what} of {key} written to {dest}")
    return command


output = _restore_command("output", "output", "output", "job_output", "Copy what JOB wrote to /output into DEST")
clone = _restore_command("clone", "code", "code", "job_code", "Copy the code JOB ran with into DEST")


@click.command()
@click.argument("job")
@click.option("-y", "--yes", is_flag=True, help="Do not ask.")
@handle_errors
def delete(job, yes) -> None:
    """Delete an ended JOB with its records and output."""
    key = job_key(job)
    if not yes and sys.stdin.isatty():
        click.confirm(f"delete job {key}, its records and its output?", abort=True)
    connect().delete(key)
    click.echo(f"deleted {key}")


@click.command()
@click.argument("jobs", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print exactly what the daemon returned.")
@handle_errors
def compare(jobs, as_json) -> None:
    """Params and last/best metrics of JOBS side by side."""
    if len(jobs) < 2 and not as_json:
        fail("compare needs at least two jobs", "floyd compare digits/1 digits/2")
    data = connect().compare([job_key(j) for j in jobs])
    if as_json:
        echo_json(data)
        return
    headers = [""] + [j["id"] for j in data["jobs"]]
    rows = [["state"] + [j["state"] for j in data["jobs"]]]
    rows += [[f"param {p}"] + [str(j["params"].get(p, "-")) for j in data["jobs"]] for p in data["params"]]
    for m in data["metrics"]:
        cells = [j["metrics"].get(m) for j in data["jobs"]]
        goal = next((c["goal"] for c in cells if c), "max")
        rows.append([f"{m} (last)"] + [_num(c["last"]) if c else "-" for c in cells])
        rows.append([f"{m} ({goal})"] + [_num(c["best"]) if c else "-" for c in cells])
    print_table(headers, rows)
