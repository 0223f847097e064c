"""``floydd audit``: the cluster's audit chain (:mod:`floydd.cluster.state.audit`): list, verify,
export for an auditor, and verify an export with no daemon at all; ``head`` prints the newest
entry as ``SEQ:HASH`` for an auditor to record, and ``verify --head`` checks a chain (the
daemon's or an export) against it (:mod:`floydd.cluster.audit_evidence`)."""

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
from floydd.cluster.state.audit import verify
from floydd.cluster.audit_evidence import check_head, parse_head

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
    @click.option("--head", "head", metavar="SEQ:HASH", default=None,
                  help="Also check that the chain still holds this head (as floydd audit head printed it): "
                       "finds a chain cut short or rewritten with its hashes recomputed.")
    @pass_where(_config_options)
    @handle_errors
    def verify_cmd(where, path, head) -> None:
        """Check the chain: any edited, removed or reordered entry is found, the first one named;
        with --head, also entries cut off the end and rewrites that recomputed every hash."""
        wanted = None if head is None else parse_head(head)
        if path is not None:
            entries = read_export(path)
            count, finding = verify(entries) if wanted is None else check_head(entries, wanted)
            where = str(path)
        else:
            client, _ = _client(*where)
            answer = client.audit_verify(None if wanted is None else wanted.text)
            count, finding, where = answer["entries"], answer["finding"], "this box's audit log"
        if finding is not None:
            click.echo(f"audit verify failed ({where}): {finding}", err=True)
            sys.exit(1)
        held = "" if wanted is None else f" up to the recorded head {wanted.text if wanted.seq else wanted.hash}"
        click.echo(f"audit verify: {count} entries, the chain is whole{held} ({where})")


    @audit.command("head")
    @click.option("--json", "as_json", is_flag=True, help="The head as the daemon returned it.")
    @STALE
    @pass_where(_config_options)
    @handle_errors
    def head_cmd(where, as_json, stale) -> None:
        """The chain's newest entry as SEQ:HASH: record it away from this box (a notebook, a ticket,
        another site); floydd audit verify --head SEQ:HASH later finds entries cut off the end and
        rewrites that recomputed every hash, which verify alone cannot."""
        client, _ = _client(*where)
        answer = client.audit_head(stale=stale)
        if as_json:
            echo_json(answer)
        if not answer["ok"]:
            click.echo(f"audit head: the chain is not whole, so its head is no evidence: {answer['finding']}",
                       err=True)
            sys.exit(1)
        if as_json:
            return
        if not answer["seq"]:
            click.echo(f"no audit entries yet; head {answer['head']}")
            return
        click.echo(answer["head"])
        click.echo(f"entry {answer['seq']}, made {_when(answer['ts'])} {time.strftime('%Z')}; "
                   f"check later: floydd audit verify --head {answer['head']}")


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
