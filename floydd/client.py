"""The typed HTTP client: the CLI and the TUI reach the daemon only through it.

Synchronous and light (``http.client`` over the daemon's unix socket or TCP), so
``floyd`` starts fast; the TUI calls it from a worker thread. Every daemon error
comes back as the :mod:`floydd.errors` class the daemon raised, with its hint.

:class:`Client` is the API, one method per call; how it reaches the daemon (socket, TCP,
pinned TLS), and why an answer that stops before its end record is raised as
:data:`GONE` rather than taken as complete, is :mod:`floydd.connection`. Job logs end
with an end frame (:mod:`floydd.logframe`), tars with their announced length.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import IO, Any, Iterator

from floydd import logframe
from floydd.connection import GONE, Connection, Progress, _Counted, _error
from floydd.errors import InternalError, InvalidSpec, Unavailable, from_payload

__all__ = ["Client", "GONE"]


class Client(Connection):
    """The daemon's API, one method per call (:class:`~floydd.connection.Connection` reaches it)."""

    # -- daemon -----------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            self._call("GET", "/v1/info", timeout=2.0)
            return True
        except Unavailable:
            return False

    def info(self) -> dict:
        return self._call("GET", "/v1/info")

    def nodes(self, *, stale: bool = False) -> list[dict]:
        return self._call("GET", "/v1/nodes", query={"stale": 1 if stale else None})

    def cluster(self) -> dict:
        return self._call("GET", "/v1/cluster")

    def create_token(self, ttl: float, *, sign_in: list[str] | None = None) -> dict:
        """A join token; ``sign_in``: whom it signs in on the box it admits (None: its maker)."""
        return self._call("POST", "/v1/cluster/tokens", {"ttl": ttl, **({} if sign_in is None else {"sign_in": sign_in})})

    def tokens(self) -> list[dict]:
        return self._call("GET", "/v1/cluster/tokens")

    def revoke_token(self, token_id: str) -> dict:
        return self._call("DELETE", f"/v1/cluster/tokens/{urllib.parse.quote(token_id, safe='')}")

    def leave(self) -> dict:
        return self._call("POST", "/v1/cluster/leave", {}, timeout=None)

    def drain(self, on: bool = True) -> dict:
        """No new placements on the daemon's box (``on`` False: again); {"node", "draining", "running"}."""
        return self._call("POST", "/v1/cluster/drain", {"drain": on})

    def remove_node(self, node_id: str) -> dict:
        return self._call("POST", "/v1/cluster/remove", {"node": node_id}, timeout=None)

    def rotate_store_key(self) -> dict:
        """A new store key epoch, made on this box (an admin's)."""
        return self._call("POST", "/v1/cluster/store-key", {}, timeout=None)

    def store_key(self) -> dict:
        """The cluster's store key epochs and this box's background re-seal."""
        return self._call("GET", "/v1/cluster/store-key")

    def people(self, *, stale: bool = False) -> list[dict]:
        """The lab's people (floydd.cluster.state.people): name, role, uids per box id."""
        return self._call("GET", "/v1/people", query={"stale": "1" if stale else None})

    def add_person(self, name: str, role: str = "user", uids: dict[str, list[int]] | None = None, *,
                   boxes: list[str] | None = None, every_box: bool = False) -> dict:
        """``boxes``: where their login name acts as them (None: the daemon's box); ``every_box``: all."""
        extra = {**({} if boxes is None else {"boxes": boxes}), **({"every_box": True} if every_box else {})}
        return self._call("POST", "/v1/people", {"name": name, "role": role, "uids": uids or {}, **extra})

    def sign_in_boxes(self, name: str, node: str | None = None, *, every_box: bool = False, on: bool = True) -> dict:
        """List (``on``) or unlist box ``node`` (or every box) where ``name``'s login name acts as them."""
        target = {"every_box": True} if every_box else {"node": node}
        return self._call("POST", f"/v1/people/{urllib.parse.quote(name, safe='')}/boxes", {**target, "on": on})

    def set_role(self, name: str, role: str) -> dict:
        return self._call("POST", f"/v1/people/{urllib.parse.quote(name, safe='')}/role", {"role": role})

    def map_uids(self, name: str, node: str, uids: list[int]) -> dict:
        return self._call("POST", f"/v1/people/{urllib.parse.quote(name, safe='')}/uids", {"node": node, "uids": uids})

    def remove_person(self, name: str) -> dict:
        return self._call("DELETE", f"/v1/people/{urllib.parse.quote(name, safe='')}")

    def whoami(self) -> dict:
        """The person this client's calls are made as: {"person", "node"}."""
        return self._call("GET", "/v1/whoami")

    def create_api_token(self, *, label: str = "", ttl: float | None = None, person: str | None = None) -> dict:
        """A personal token (for ``person``: an admin's call) whose text, ``token``, is in this
        answer only (:mod:`floydd.cluster.state.apitokens`)."""
        body: dict[str, Any] = {"label": label}
        if ttl is not None:
            body["ttl"] = ttl
        if person:
            body["person"] = person
        return self._call("POST", "/v1/tokens", body)

    def api_tokens(self, *, stale: bool = False) -> list[dict]:
        """The caller's personal tokens (an admin: everyone's), without secrets."""
        return self._call("GET", "/v1/tokens", query={"stale": "1" if stale else None})

    def revoke_api_token(self, token_id: str) -> dict:
        return self._call("DELETE", f"/v1/tokens/{urllib.parse.quote(token_id, safe='')}")

    def audit(self, since: float | None = None, *, stale: bool = False) -> list[dict]:
        """The audit chain in order (floydd.cluster.state.audit), with every change committed before the
        call; ``stale``: as the daemon's box holds it now."""
        return self._call("GET", "/v1/audit", query={"since": since, "stale": "1" if stale else None})

    def audit_verify(self, head: str | None = None) -> dict:
        """This box's stored chain checked (``head``: also against a recorded ``SEQ:HASH``)."""
        return self._call("GET", "/v1/audit/verify", query={"head": head})

    def audit_head(self, *, stale: bool = False) -> dict:
        """The chain's newest entry (``head``: ``SEQ:HASH``), for an auditor to record."""
        return self._call("GET", "/v1/audit/head", query={"stale": "1" if stale else None})

    # -- jobs -------------------------------------------------------------------------

    def submit(self, spec: dict) -> dict:
        return self._call("POST", "/v1/jobs", spec, timeout=None)

    def check_job(self, spec: dict) -> dict:
        """Would the daemon take this job (``spec`` without its code)? Refused as a submit would be."""
        return self._call("POST", "/v1/jobs/check", spec)

    def jobs(self, project: str | None = None, state: str | None = None, *, stale: bool = False,
             limit: int | None = None, offset: int = 0, since: float | None = None,
             user: str | None = None, sort: str | None = None, q: str | None = None) -> list[dict]:
        """Jobs, newest first (archived ones too) or by ``sort`` (``state``, ``-time``...:
        :data:`floydd.model.SORTS`), whose text holds ``q``: ``limit`` of them from ``offset``
        (None: every one), created at or after ``since`` (unix seconds), submitted by ``user``."""
        return self._call("GET", "/v1/jobs", query={"project": project, "state": state,
                                                    "stale": "1" if stale else None, "limit": limit,
                                                    "offset": offset or None, "since": since, "user": user,
                                                    "sort": sort or None, "q": q or None})

    def job(self, job: str) -> dict:
        return self._call("GET", f"/v1/jobs/{_job_path(job)}")

    def metrics(self, job: str) -> dict:
        return self._call("GET", f"/v1/jobs/{_job_path(job)}/metrics")

    def stop(self, job: str) -> dict:
        return self._call("POST", f"/v1/jobs/{_job_path(job)}/stop", {})

    def restart(self, job: str, overrides: dict) -> dict:
        return self._call("POST", f"/v1/jobs/{_job_path(job)}/restart", overrides, timeout=None)

    def delete(self, job: str) -> dict:
        return self._call("DELETE", f"/v1/jobs/{_job_path(job)}")

    def logs(self, job: str, *, follow: bool = False, offset: int = 0, rank: int | None = None,
             attempt: int | None = None) -> Iterator[bytes]:
        """Raw log lines (``b"<ts> <o|e> <text>\\n"``), following until the job ends; ``rank``:
        a part of a distributed job; ``attempt``: an earlier attempt's log (default: the latest).
        Raises when the log stopped before its end frame (:mod:`floydd.logframe`): why the
        daemon said, or :data:`GONE`."""
        query = {"follow": int(follow), "offset": offset, **({"rank": rank} if rank is not None else {}),
                 **({"attempt": attempt} if attempt is not None else {})}
        conn, resp = self._open("GET", f"/v1/jobs/{_job_path(job)}/logs", query=query, timeout=None)
        try:
            token = resp.getheader(logframe.HEADER)
            if not token:
                raise InternalError(f"floydd at {self.where} sent a log without an end marker "
                                    f"({logframe.HEADER} header)",
                                    hint="the daemon is of another floydd version: update it (`floydd --version`)")
            with self._reading():
                end = yield from logframe.unframe(resp, token)
            if end is None:
                raise self._gone()
            if "error" in end:
                raise from_payload(end, 503)
        finally:
            conn.close()

    def wait(self, job: str, timeout: float | None = None) -> dict:
        """Block until the job is in a final state; returns the job."""
        return self._call("GET", f"/v1/jobs/{_job_path(job)}/wait",
                          query={"timeout": timeout}, timeout=None)

    def job_output(self, job: str, dest: Path) -> Iterator[dict]:
        return self._stream("POST", f"/v1/jobs/{_job_path(job)}/output", {"dest": os.fspath(dest)})

    def job_code(self, job: str, dest: Path) -> Iterator[dict]:
        return self._stream("POST", f"/v1/jobs/{_job_path(job)}/code", {"dest": os.fspath(dest)})

    def compare(self, jobs: list[str]) -> dict:
        return self._call("GET", "/v1/compare", query={"jobs": ",".join(jobs)})

    # -- datasets ---------------------------------------------------------------------

    def datasets(self, name: str | None = None) -> list[dict]:
        return self._call("GET", "/v1/datasets", query={"name": name})

    def dataset(self, ref: str) -> dict:
        return self._call("GET", "/v1/datasets/info", query={"ref": ref})

    def upload_code(self, folder: Path, limit: int | None = None, progress: Progress | None = None) -> dict:
        """Send ``folder`` (``.floydignore`` honoured) as a tar, for a daemon that cannot read
        it (FLOYD_HOST, another user's daemon); ``{"code_upload", "files", "bytes"}``: submit
        with ``code_upload``, a handle good on that daemon for the caller only. ``progress(sent,
        total)`` follows the bytes sent."""
        from floydd.store.tarball import pack   # only here: plain floyd commands start faster without it
        with tempfile.TemporaryFile() as spool:
            pack(folder, spool, limit)
            spool.seek(0)
            timeout = None if self.timeout is None else max(self.timeout, 600.0)
            return self._call("POST", "/v1/code", raw=_Counted.file(spool, progress), timeout=timeout)

    def upload(self, path: Path, name: str, message: str = "", visibility: str | None = None) -> Iterator[dict]:
        """A new version of ``name`` from ``path`` (``visibility`` ``private``: only its owner
        and admins use it; None: as the dataset is, a new one lab-wide)."""
        data = {"path": os.fspath(path), "name": name, "message": message}
        if visibility:
            data["visibility"] = visibility
        return self._stream("POST", "/v1/datasets", data)

    def upload_tar(self, folder: Path, name: str, message: str = "",
                   progress: Progress | None = None, visibility: str | None = None) -> Iterator[dict]:
        """:meth:`upload` for a daemon that cannot read ``folder``: sent as a tar."""
        from floydd.store.tarball import pack
        with tempfile.TemporaryFile() as spool:
            pack(folder, spool, ignore=False)
            spool.seek(0)
            yield from self._stream("POST", "/v1/datasets/tar", raw=_Counted.file(spool, progress),
                                    query={"name": name, "message": message or None, "visibility": visibility})

    def fetch_tar(self, path: str, dest: Path, query: dict | None = None, progress: Progress | None = None):
        """GET a tree as a tar (``/v1/jobs/P/N/output.tar``, ``/v1/datasets/tar?ref=``) and
        unpack it into ``dest`` (new or empty) on this machine."""
        from floydd.store.tarball import unpack_into
        conn, resp = self._open("GET", path, query=query, timeout=None)
        try:
            total = int(resp.getheader("Content-Length") or 0) or None
            return unpack_into(_Counted(resp, total, progress, cut=self._gone), dest)
        finally:
            conn.close()

    def clone(self, ref: str, dest: Path) -> Iterator[dict]:
        return self._stream("POST", "/v1/datasets/clone", {"ref": ref, "dest": os.fspath(dest)})

    def delete_dataset(self, ref: str) -> dict:
        return self._call("POST", "/v1/datasets/delete", {"ref": ref})

    def verify(self, name: str | None = None, *, repair: bool = False) -> Iterator[dict]:
        return self._stream("POST", "/v1/store/verify", {"name": name, "repair": repair})

    def gc(self) -> dict:
        return self._call("POST", "/v1/store/gc", {}, timeout=None)

    # -- export files between sites (floydd.bundle, floydd.api.exchange) ----------------

    @contextlib.contextmanager
    def export(self, *, jobs: list[str] = (), datasets: list[str] = (), key_hex: str,
               kdf: dict | None = None) -> Iterator[tuple[IO[bytes], int | None]]:
        """The export file of ``jobs`` (PROJECT or PROJECT/N) and dataset versions ``datasets``,
        sealed under the export key ``key_hex``: ``(stream, about how many bytes)``. The stream
        raises :data:`GONE` when the daemon stops answering; a file that ends early or with an
        error record is for :class:`floydd.bundle.Reader` to refuse."""
        conn, resp = self._open("POST", "/v1/export", {"jobs": list(jobs), "datasets": list(datasets),
                                                       "key": key_hex, "kdf": kdf or {"kind": "random"}},
                                timeout=None)
        try:
            size = resp.getheader("Floydd-Export-Size")
            yield _Counted(resp, None, None, cut=self._gone), int(size) if size and size.isdigit() else None
        finally:
            conn.close()

    def export_into(self, ticket: str, *, jobs: list[str] = (), datasets: list[str] = (), key_hex: str,
                    kdf: dict | None = None) -> Iterator[dict]:
        """:meth:`export`, written by the daemon straight into the file handed over under
        ``ticket`` (:meth:`hand_over`) and fsynced there: progress events, then ``{"bytes"}``."""
        return self._stream("POST", "/v1/export", {"jobs": list(jobs), "datasets": list(datasets), "key": key_hex,
                                                   "kdf": kdf or {"kind": "random"}, "to_ticket": ticket})

    def import_handed(self, ticket: str, *, key_hex: str, name: str = "",
                      expect_origin: str | None = None) -> Iterator[dict]:
        """:meth:`import_file` of the file handed over under ``ticket`` (:meth:`hand_over`),
        which the daemon reads itself: progress events, then what it made."""
        return self._stream("POST", "/v1/import", query={"name": name or None, "expect_origin": expect_origin},
                            headers={"Floydd-Export-Key": key_hex, "Floydd-File-Ticket": ticket})

    def import_file(self, f: IO[bytes], *, key_hex: str, name: str = "", expect_origin: str | None = None,
                    progress: Progress | None = None) -> dict:
        """Send the export file ``f`` (from its current position) to be verified and imported;
        what it made (``ImportResult``). ``progress(sent, total)`` follows the bytes sent."""
        query = urllib.parse.urlencode({k: v for k, v in (("name", name), ("expect_origin", expect_origin)) if v})
        headers = {**self._headers(), "Content-Type": "application/octet-stream", "Floydd-Export-Key": key_hex}
        data = _Counted.file(f, progress)
        headers["Content-Length"] = str(data.total)
        conn = self._connection(None)
        conn.blocksize = 1 << 20                    # http.client sends a file 8 KiB a read otherwise
        try:
            try:
                conn.request("POST", "/v1/import" + (f"?{query}" if query else ""), body=data, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                pass                    # refused before it read it all (a wrong key): its answer says why
            with self._reading():
                resp = conn.getresponse()
                raw = resp.read()
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise self._absent(exc) from None
        finally:
            conn.close()
        if resp.status >= 400:
            raise _error(raw, resp.status)
        return json.loads(raw) if raw else None


def _job_path(job: str) -> str:
    """``"digits/3"`` -> URL path part; the daemon validates the rest."""
    project, sep, number = str(job).rpartition("/")
    if not sep or not project or not number:
        raise InvalidSpec(f"{job!r} is not a job name",
                          hint="jobs are named PROJECT/NUMBER, e.g. digits/3 (see `floyd status`)")
    return f"{urllib.parse.quote(project, safe='')}/{urllib.parse.quote(number, safe='')}"

