"""``floyd export`` / ``floyd import`` (and ``floyd data export``): move work between sites as one file.

The CLI makes the export key (or reads it from a ``--key-file``, or derives it from a
passphrase with scrypt) and hands it to the daemon for this one request; a key it made is
printed once. The file is written next to its destination and verified (every part's hash,
the manifest's MAC, the signature): only a whole, verified file is renamed into place. A
daemon on this machine is handed the open file (:mod:`floydd.api.handoff`): it writes the
export into it itself, or reads the import from it, and the CLI verifies the file from the
page cache as it is written (a thread reads up to what is written so far); elsewhere
(FLOYD_HOST) the file streams in the request and is verified while it arrives. ``floyd
import --check`` verifies a file completely (every record decrypted) with no daemon at all,
for a site that wants to look before it imports.
"""

from __future__ import annotations

import errno
import os
import secrets
import sys
import threading
from datetime import datetime
from pathlib import Path

import click

from floydd.cli.common import connect, echo_json, fail, handle_errors, new_file
from floydd.cli.progress import follow_progress, transfer_bar
from floydd.present import human_bytes

__all__ = ["export", "import_", "write_export", "KEY_ENV", "PASSPHRASE_ENV"]

KEY_ENV = "FLOYD_EXPORT_KEY"
PASSPHRASE_ENV = "FLOYD_EXPORT_PASSPHRASE"
_MIN_PASSPHRASE = 8


def export_options(fn):
    """What ``floyd export`` and ``floyd data export`` take after their arguments: the file, the
    key, ``--force`` and ``--json``."""
    for option in reversed((
            click.option("--to", "dest", required=True, type=click.Path(path_type=Path), help="The file to write."),
            click.option("--key-file", type=click.Path(path_type=Path),
                         help="Seal it under the key in this file; a new key is written there (0600) if it "
                              "does not exist."),
            click.option("--passphrase", is_flag=True,
                         help=f"Seal it under a passphrase you type (or {PASSPHRASE_ENV}), stretched with scrypt."),
            click.option("--force", is_flag=True, help="Replace the file if it exists."),
            click.option("--json", "as_json", is_flag=True))):
        fn = option(fn)
    return fn


@click.command("export")
@click.argument("jobs", nargs=-1, required=True)
@export_options
@handle_errors
def export(jobs: tuple[str, ...], dest: Path, key_file: Path | None, passphrase: bool, force: bool,
           as_json: bool) -> None:
    """Write ended jobs to one signed, sealed file for another site.

    JOBS are PROJECT (its ended jobs) or PROJECT/N. The file holds their params, metrics,
    events, logs, code, outputs and the dataset versions they mounted; `floyd import FILE`
    on the other site adds them under the same project names, with new numbers.
    """
    write_export(jobs=list(jobs), datasets=[], dest=dest, key_file=key_file, passphrase=passphrase, force=force,
                 as_json=as_json)


@click.command("import")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--key", "key_text", envvar=KEY_ENV, help=f"The export key (fxk1-...); or {KEY_ENV}.")
@click.option("--key-file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The file holding the export key.")
@click.option("--expect-origin", metavar="FINGERPRINT",
              help="Refuse a file not made by this cluster (its CA fingerprint, or the first 16 hex digits).")
@click.option("--check", is_flag=True, help="Only verify the file here (every part, the signature); import nothing.")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def import_(file: Path, key_text: str | None, key_file: Path | None, expect_origin: str | None, check: bool,
            as_json: bool) -> None:
    """Check an export FILE and add its jobs and dataset versions here.

    The jobs come finished, with new numbers under the same project names and a note of
    where they came from (floyd info shows it); nothing runs. Importing the same file
    again adds nothing.
    """
    from floydd.bundle import Reader, read_header        # here: plain floyd commands start faster without it
    file = file.expanduser().absolute()
    with open(file, "rb") as f:
        header = read_header(f, file.name)
    key = _import_key(header, key_text, key_file)
    if check:
        with open(file, "rb") as f, transfer_bar(f"checking {file.name}") as progress:
            reader = Reader(_Counting(f, progress, file.stat().st_size), key, where=file.name)
            for _ in reader.parts():
                pass
        origin = reader.origin
        if expect_origin and not origin.fingerprint.removeprefix("box:").startswith(expect_origin.lower()):
            fail(f"{file.name} was made by {origin.describe()}, not by the origin you expected")
        contents = reader.manifest.get("contents") or {}
        if as_json:
            echo_json({"file": str(file), "origin": origin.to_dict(), "contents": contents, "ok": True})
            return
        click.echo(f"{file.name} is whole and validly signed by {origin.describe()}")
        _echo_contents(contents)
        return
    client = connect()
    with open(file, "rb") as f:
        ticket = client.hand_over(f.fileno(), "r")
        if ticket is not None:                  # the daemon reads it itself: no second stream
            result = follow_progress(client.import_handed(ticket, key_hex=key.hex, name=file.name,
                                                          expect_origin=expect_origin), f"importing {file.name}")
        else:
            with transfer_bar(f"importing {file.name}") as progress:
                result = client.import_file(f, key_hex=key.hex, name=file.name, expect_origin=expect_origin,
                                            progress=progress)
    if as_json:
        echo_json(result)
        return
    when = datetime.fromtimestamp(result["created"]).strftime("%Y-%m-%d %H:%M") if result.get("created") else "?"
    click.echo(f"imported {file.name}: from {result['origin']['description']}, exported by "
               f"{result.get('exported_by') or '?'} on {when}")
    for moved in result["jobs"]:
        click.echo(f"  {moved['origin_job']:<20} -> {moved['job']}" + ("" if moved["new"] else "   (imported before)"))
    for version in result["datasets"]:
        click.echo(f"  data {version['origin_ref']:<15} -> {version['ref']}" + ("" if version["new"] else "   (here before)"))


def write_export(*, jobs: list[str], datasets: list[str], dest: Path, key_file: Path | None, passphrase: bool,
                 force: bool, as_json: bool) -> None:
    """What ``floyd export`` and ``floyd data export`` share: key, stream, verify, rename."""
    from floydd.bundle import Reader
    dest = new_file(dest, force=force, what="the export")
    key, kdf, how = _export_key(key_file, passphrase)
    client = connect()
    partial = dest.with_name(f".{dest.name}.partial-{secrets.token_hex(4)}")
    try:
        with open(partial, "xb") as out:
            ticket = client.hand_over(out.fileno(), "w")
            if ticket is not None:              # the daemon writes (and fsyncs) it: no second stream
                with open(partial, "rb", buffering=0) as back:
                    reader = _verified_as_written(
                        back, key, dest.name, f"exporting to {dest.name}",
                        client.export_into(ticket, jobs=jobs, datasets=datasets, key_hex=key.hex, kdf=kdf))
            else:
                with client.export(jobs=jobs, datasets=datasets, key_hex=key.hex, kdf=kdf) as (stream, size), \
                        transfer_bar(f"exporting to {dest.name}") as progress:
                    reader = Reader(_Tee(stream, out, progress, size), key, where=dest.name, decrypt=False)
                    for _ in reader.parts():
                        pass
                    out.flush()
                    os.fsync(out.fileno())
        os.replace(partial, dest)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(f"no space left on the device of {dest}; nothing was written", "free space there, or export elsewhere")
        raise
    finally:
        partial.unlink(missing_ok=True)
    contents = reader.manifest.get("contents") or {}
    if as_json:
        echo_json({"file": str(dest), "bytes": reader.position, "origin": reader.origin.to_dict(),
                   "contents": contents, **({"key": key.text()} if how == "printed" else {})})
        return
    click.echo(f"wrote {dest} ({human_bytes(reader.position)}), signed by {reader.origin.describe()}")
    _echo_contents(contents)
    if how == "printed":
        click.echo("export key, shown this once (the file cannot be opened without it; keep it apart from the file):")
        click.echo(f"  {key.text()}")
        click.echo(f"  import with: floyd import {dest.name} --key-file FILE-WITH-THE-KEY")
    elif how == "new file":
        click.echo(f"sealed under a new key, written to {key_file} (0600): send it apart from the file")
    elif how == "file":
        click.echo(f"sealed under the key in {key_file}")
    else:
        click.echo("sealed under your passphrase: floyd import asks for it")


def _verified_as_written(f, key, where: str, label: str, events):
    """The :class:`~floydd.bundle.Reader` that verified the export file ``f`` (every part's
    hash, the MAC, the signature) while the daemon wrote it, answering ``events``: a thread
    reads what is in the file so far and waits for the next progress event for more. A check
    that fails is raised at the next event, which drops the answer: the daemon stops at its
    next write. It returns once both the check and the daemon (its fsync) are done."""
    from floydd.bundle import Reader
    src = _Following(f)
    done: dict = {}

    def verify() -> None:
        try:
            reader = Reader(src, key, where=where, decrypt=False)
            for _ in reader.parts():
                pass
            done["reader"] = reader
        except BaseException as exc:    # noqa: BLE001 - raised in the CLI's thread
            done["error"] = exc

    def tracked():
        try:
            for event in events:
                if "result" in event:
                    src.end()               # all is written and fsynced: its end is the file's end
                else:
                    src.tick()
                if "error" in done:
                    raise done["error"]
                yield event
        finally:
            events.close()              # a failed check hangs up: the daemon stops writing
    thread = threading.Thread(target=verify, name="floyd-export-verify", daemon=True)
    thread.start()
    try:
        follow_progress(tracked(), label)
        thread.join()
    finally:
        src.stop()
        thread.join()
    if "error" in done:
        raise done["error"]
    return done["reader"]


def _echo_contents(contents: dict) -> None:
    for title, names in (("jobs", contents.get("jobs")), ("datasets", contents.get("datasets")),
                         ("mounted data", contents.get("mounted"))):
        if names:
            click.echo(f"  {title}: {', '.join(names)}")
    if contents.get("skipped"):
        click.echo(f"  left out (not ended): {', '.join(contents['skipped'])}", err=True)


def _export_key(key_file: Path | None, passphrase: bool) -> tuple:
    """(key, the header's kdf, how the person gets it: printed, new file, file, passphrase)."""
    from floydd.bundle import SCRYPT, ExportKey, new_salt
    if passphrase and key_file:
        fail("give --passphrase or --key-file, not both")
    if passphrase:
        text = os.environ.get(PASSPHRASE_ENV) or click.prompt("passphrase for the export", hide_input=True,
                                                              confirmation_prompt=True, err=True)
        if len(text) < _MIN_PASSPHRASE:
            fail(f"the passphrase is shorter than {_MIN_PASSPHRASE} characters", "use a longer one, or --key-file")
        kdf = {"kind": "scrypt", "salt": new_salt(), **SCRYPT}
        return ExportKey.from_passphrase(text, kdf), kdf, "passphrase"
    if key_file is None:
        return ExportKey.new(), {"kind": "random"}, "printed"
    key_file = key_file.expanduser()
    if key_file.exists():
        return ExportKey.from_text(key_file.read_text()), {"kind": "random"}, "file"
    key = ExportKey.new()
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.text() + "\n")
    return key, {"kind": "random"}, "new file"


def _import_key(header: dict, key_text: str | None, key_file: Path | None):
    from floydd.bundle import ExportKey
    kdf = header.get("kdf") or {}
    if kdf.get("kind") == "scrypt":
        text = os.environ.get(PASSPHRASE_ENV)
        if text is None:
            if not sys.stdin.isatty():
                fail("this export is sealed under a passphrase", f"type it at a terminal, or set {PASSPHRASE_ENV}")
            text = click.prompt("passphrase of the export", hide_input=True, err=True)
        return ExportKey.from_passphrase(text, kdf)
    if key_file is not None:
        return ExportKey.from_text(key_file.read_text())
    if key_text:
        return ExportKey.from_text(key_text)
    if not sys.stdin.isatty():
        fail("this export is sealed under a key", f"give --key-file FILE, --key fxk1-..., or set {KEY_ENV}")
    return ExportKey.from_text(click.prompt("export key (fxk1-...)", hide_input=True, err=True))


class _Tee:
    """What the reader reads of the export stream, written to the file and counted."""

    def __init__(self, src, out, progress, total: int | None) -> None:
        self._src, self._out, self._progress, self._total, self._done = src, out, progress, total, 0

    def read(self, n: int) -> bytes:
        data = self._src.read(n)
        self._out.write(data)
        self._done += len(data)
        self._progress(self._done, self._total)
        return data


class _Following:
    """The export file as the daemon writes it, for a reader in another thread: a read at the
    end of what is written so far waits for the next event (:meth:`tick`), until :meth:`end`
    (all is written: the end of the file is its end) or :meth:`stop` (the reader stops)."""

    def __init__(self, f) -> None:
        self._f = f
        self._cond = threading.Condition()
        self._ticks, self._ended, self._stopped = 0, False, False

    def readinto(self, buffer) -> int:
        while True:
            with self._cond:
                if self._stopped:
                    raise _Stopped("the export ended before its file was checked")
                seen, ended = self._ticks, self._ended
            n = self._f.readinto(buffer)
            if n or ended:
                return n
            with self._cond:
                self._cond.wait_for(lambda: self._ticks != seen or self._stopped)

    def tick(self) -> None:
        with self._cond:
            self._ticks += 1
            self._cond.notify_all()

    def end(self) -> None:
        with self._cond:
            self._ended = True
            self._ticks += 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class _Stopped(Exception):
    pass


class _Counting:
    def __init__(self, src, progress, total: int) -> None:
        self._src, self._progress, self._total, self._done = src, progress, total, 0

    def read(self, n: int) -> bytes:
        data = self._src.read(n)
        self._count(len(data))
        return data

    def readinto(self, buffer) -> int:
        n = self._src.readinto(buffer)
        self._count(n)
        return n

    def _count(self, n: int) -> None:
        self._done += n
        self._progress(self._done, self._total)
