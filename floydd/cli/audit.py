"""``floydd audit``: the cluster's audit chain (:mod:`floydd.cluster.audit`): list, verify,
export for an auditor, and verify an export with no daemon at all."""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path

import click

from floydd.cli.common import STALE, echo_json, fail, handle_errors, new_file, pass_where
from floydd.cli.jobs import since_time
from floydd.cli.table import print_table
from floydd.cluster.audit import verify

__all__ = ["make_audit", "read_export"]


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def read_export(path: Path) -> list:
    """The entries of an export (JSON lines); a line that is not JSON stays its text, so that
    :func:`verify` names its position."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}", "give the file floydd audit export wrote")
    except UnicodeDecodeError:
        fail(f"{path} is not a text file", "give the file floydd audit export wrote")
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(line)
    return out


def make_audit(_config_options, _client) -> click.Group:
    """The ``floydd audit`` group, with floydd's options for finding the daemon (``--state-dir``,
    ``--config``, ``--system``) and its way of connecting, handed in by :mod:`floydd.cli.floydd`."""

    @click.group(invoke_without_command=True)
    @_config_options
    @click.option("--since", metavar="WHEN", help="Entries since WHEN: 30m, 2h, 3d, 1w ago, or a date (2024-05-01).")
    @click.option("--json", "as_json", is_flag=True, help="The entries as the daemon returned them.")
    @STALE
    @click.pass_context
    @handle_errors
    def audit(ctx, state_dir, config_file, system, since, as_json, stale) -> None:
        """Who changed what, when and from which box: the cluster's hash-chained audit log."""
        ctx.obj = (state_dir, config_file, system)      # the subcommands reach the same daemon
        if ctx.invoked_subcommand is not None:
            return
        client, _ = _client(state_dir, config_file, system)
        entries = client.audit(None if since is None else since_time(since), stale=stale)
        if as_json:
            echo_json(entries)
            return
        if not entries:
            click.echo("no audit entries" + (" since then" if since else " yet"))
            return
        print_table(["SEQ", "WHEN", "WHO", "BOX", "WHAT"],
                    [[str(e["seq"]), _when(e["ts"]), e["who"], e["box"][:12] or "-", f"{e['op']} {e['what']}".strip()]
                     for e in entries])


    @audit.command("verify")
    @click.option("--file", "path", type=click.Path(path_type=Path, dir_okay=False), default=None,
                  help="Check an export (floydd audit export) instead of the daemon's copy.")
    @pass_where(_config_options)
    @handle_errors
    def verify_cmd(where, path) -> None:
        """Check the chain: any edited, removed or reordered entry is found, the first one named."""
        if path is not None:
            entries = read_export(path)
            count, finding = verify(entries)
            where = str(path)
        else:
            client, _ = _client(*where)
            answer = client.audit_verify()
            count, finding, where = answer["entries"], answer["finding"], "this box's audit log"
        if finding is not None:
            click.echo(f"audit verify failed ({where}): {finding}", err=True)
            sys.exit(1)
        click.echo(f"audit verify: {count} entries, the chain is whole ({where})")


    @audit.command("export")
    @click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
    @click.option("--force", is_flag=True, help="Replace FILE if it exists.")
    @STALE
    @pass_where(_config_options)
    @handle_errors
    def export(where, file, force, stale) -> None:
        """Write the chain to FILE as JSON lines, for an auditor (floydd audit verify --file FILE)."""
        file = new_file(file, force=force, what="the audit log")
        client, _ = _client(*where)
        entries = client.audit(stale=stale)
        tmp = file.with_name(f".{file.name}.partial")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                for e in entries:
                    f.write(json.dumps(e, sort_keys=True, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, file)
        except OSError as exc:
            fail(f"cannot write {file}: {exc.strerror}; nothing was written", "free space there, or export elsewhere"
                 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "export into a folder you may write to")
        finally:
            tmp.unlink(missing_ok=True)
        click.echo(f"{len(entries)} entries written to {file}; check: floydd audit verify --file {file}")

    return audit
