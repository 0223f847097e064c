"""The typed HTTP client: the CLI and the TUI reach the daemon only through it.

Synchronous and light (``http.client`` over the daemon's unix socket or TCP), so
``floyd`` starts fast; the TUI calls it from a worker thread. Every daemon error
comes back as the :mod:`floydd.errors` class the daemon raised, with its hint.

Every streamed answer ends with an explicit end record: NDJSON streams with a
``{"result": ...}`` or ``{"error": ...}`` event, job logs with an end frame
(:mod:`floydd.logframe`), tars with their announced length. An answer that stops
before its end means the daemon died mid-command: it is raised as
:class:`~floydd.errors.Unavailable` with code :data:`GONE`, never taken as a short
but complete answer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import urllib.parse
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from floydd import logframe
from floydd.errors import InternalError, InvalidSpec, Unauthorized, Unavailable, from_payload
from floydd.security.owned_dirs import is_shared_socket, open_owned_dir, socket_folder_hint

__all__ = ["Client", "GONE"]

GONE = "daemon_gone"
"""The code of the error raised when the daemon stops answering in the middle of an answer."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        # A socket under the temp dir is talked to only when its folder is ours and 0700
        # (another local user may have made the folder first and put their own socket
        # there); it is reached through the descriptor of the folder that was checked.
        folder_fd = None
        path = self._path
        if is_shared_socket(Path(path)):
            folder = Path(path).parent
            folder_fd = open_owned_dir(folder, hint=socket_folder_hint(folder))
            path = f"/proc/self/fd/{folder_fd}/{Path(path).name}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            sock.settimeout(self.timeout)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        finally:
            if folder_fd is not None:
                os.close(folder_fd)
        self.sock = sock


Progress = Callable[[int, "int | None"], object]


class _Counted:
    """A file or response read in blocks, reporting ``progress(done, total)`` as it goes;
    ``cut()``: the error for a response that breaks or ends short of ``total``."""

    def __init__(self, src: IO[bytes], total: int | None, progress: Progress | None,
                 cut: Callable[[], Exception] | None = None) -> None:
        self.src, self.total, self.progress, self.done, self.cut = src, total, progress, 0, cut

    @classmethod
    def file(cls, f: IO[bytes], progress: Progress | None) -> _Counted:
        return cls(f, os.fstat(f.fileno()).st_size - f.tell(), progress)

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.src.read(size)
        except (http.client.HTTPException, OSError):
            if self.cut is None:
                raise
            raise self.cut() from None
        if not data and size and self.cut is not None and self.total is not None and self.done < self.total:
            raise self.cut()                # an answer shorter than announced: cut short
        self.done += len(data)
        if self.progress is not None:
            self.progress(self.done, self.total)
        return data


class Client:
    """Talks to one daemon, on a unix socket path or ``host:port``; ``log_path``: where that
    daemon logs, when known (named in the hint when it goes away)."""

    def __init__(self, socket_path: Path | None = None, *, address: str | None = None,
                 token: str | None = None, timeout: float | None = 30.0, log_path: Path | None = None,
                 ca_pem: bytes | None = None) -> None:
        if (socket_path is None) == (address is None):
            raise ValueError("give exactly one of socket_path and address")
        self.socket_path = socket_path
        self.address = address
        self.token = token
        self.timeout = timeout
        self.log_path = log_path
        self.ca_pem = ca_pem
        """With ``address``: TLS, accepting only a server that this CA signed (``floyd login``
        pinned it, :mod:`floydd.security.pinning`); None: plain HTTP (the loopback dev port)."""
        self._tls = None

    @property
    def remote(self) -> bool:
        """Whether files travel as tar streams: the daemon may be on another machine
        (``FLOYD_HOST``), or it is another user's (a system daemon, whose socket is root's): it
        reads and writes no path of ours for us (:func:`floydd.api.request.same_user_only`)."""
        if self.address is not None:
            return True
        try:
            return os.stat(self.socket_path).st_uid != os.geteuid()
        except OSError:
            return False

    @property
    def where(self) -> str:
        if self.socket_path:
            return str(self.socket_path)
        return f"{'https' if self.ca_pem else 'http'}://{self.address}"

    # -- plumbing ---------------------------------------------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(os.fspath(self.socket_path), timeout)
        host, _, port = self.address.rpartition(":")
        host = host.strip("[]")
        if self.ca_pem is None:
            return http.client.HTTPConnection(host, int(port), timeout=timeout)
        if self._tls is None:
            from floydd.security.pinning import pinned_context
            self._tls = pinned_context(self.ca_pem)
        return http.client.HTTPSConnection(host, int(port), timeout=timeout, context=self._tls)

    def _open(self, method: str, path: str, body: Any = None, *, query: dict | None = None,
              timeout: float | None = None, raw: _Counted | None = None,
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        if query:
            clean = {k: v for k, v in query.items() if v is not None}
            if clean:
                path += "?" + urllib.parse.urlencode(clean)
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data: Any = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:           # a file: sent with its length, in blocks
            data = raw
            headers["Content-Type"] = "application/x-tar"
            headers["Content-Length"] = str(raw.total)
        conn = self._connection(self.timeout if timeout is None else timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            conn.close()
            raise Unavailable(f"no floydd daemon answers at {self.where} ({exc.strerror})",
                              hint="start one with `floydd start`, or run any `floyd` command to start one") from None
        except socket.timeout:
            conn.close()
            raise self._slow() from None
        except ssl.SSLCertVerificationError:
            conn.close()                # refused at the handshake: the token was never sent
            raise Unauthorized(f"{self.where} is not a box of the cluster you logged in to (its certificate "
                               "is not from the CA you pinned)", code="ca_fingerprint_mismatch",
                               hint="if the lab made its cluster anew, floyd login again and check the fingerprint; "
                                    "else someone may be intercepting: tell the lab's admin") from None
        except (http.client.HTTPException, ConnectionResetError, BrokenPipeError):
            conn.close()                # it took the request, then closed without (a whole) answer
            raise self._gone() from None
        except OSError as exc:
            conn.close()
            raise Unavailable(f"cannot talk to floydd at {self.where}: {exc}",
                              hint="check that the daemon is running: `floydd status`") from None
        if resp.status >= 400:
            with self._reading():
                raw = resp.read()
            conn.close()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {"error": {"message": raw.decode(errors="replace").strip() or f"HTTP {resp.status}"}}
            raise from_payload(payload, resp.status)
        return conn, resp

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        conn, resp = self._open(method, path, body, **kw)
        try:
            with self._reading():
                raw = resp.read()
        finally:
            conn.close()
        return json.loads(raw) if raw else None

    def _stream(self, method: str, path: str, body: Any = None, **kw: Any) -> Iterator[dict]:
        """An NDJSON stream: one event per line, up to the ``result`` event; an ``error`` event
        is raised, and so is a stream that stops before either (the daemon went away)."""
        conn, resp = self._open(method, path, body, timeout=None, **kw)
        try:
            with self._reading():
                for line in resp:
                    if not line.endswith(b"\n"):
                        break           # a last line cut in the middle
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError:
                        raise InternalError(f"floydd at {self.where} sent a malformed event: {line[:200]!r}",
                                            hint="this is a bug; see the daemon log") from None
                    if "error" in event:
                        raise from_payload(event, 500)
                    yield event
                    if "result" in event:
                        return
            raise self._gone()
        finally:
            conn.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Reading an answer's body: a connection that breaks is the daemon going away."""
        try:
            yield
        except socket.timeout:
            raise self._slow() from None
        except (http.client.HTTPException, OSError):
            raise self._gone() from None

    def _slow(self) -> Unavailable:
        return Unavailable(f"floydd at {self.where} did not answer in time",
                           hint="check the daemon log; `floydd status` shows whether it is alive")

    def _gone(self) -> Unavailable:
        """The daemon stopped in the middle of an answer (it died, or the connection broke)."""
        if self.remote:
            check = "check the daemon on that box with `floydd status`"
        else:
            log = self.log_path if self.log_path is not None and self.log_path.exists() else None
            check = "check it with `floydd status`" + (f" and its log {log}" if log else "")
        return Unavailable(f"the floydd daemon at {self.where} went away in the middle of this command",
                           code=GONE, hint=f"{check}; then run the command again")

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

    def create_token(self, ttl: float) -> dict:
        return self._call("POST", "/v1/cluster/tokens", {"ttl": ttl})

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

    def people(self, *, stale: bool = False) -> list[dict]:
        """The lab's people (floydd.cluster.people): name, role, uids per box id."""
        return self._call("GET", "/v1/people", query={"stale": "1" if stale else None})

    def add_person(self, name: str, role: str = "user", uids: dict[str, list[int]] | None = None) -> dict:
        return self._call("POST", "/v1/people", {"name": name, "role": role, "uids": uids or {}})

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
        answer only (:mod:`floydd.cluster.apitokens`)."""
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
        """The audit chain in order (floydd.cluster.audit), with every change committed before the
        call; ``stale``: as the daemon's box holds it now."""
        return self._call("GET", "/v1/audit", query={"since": since, "stale": "1" if stale else None})

    def audit_verify(self) -> dict:
        return self._call("GET", "/v1/audit/verify")

    # -- jobs -------------------------------------------------------------------------

    def submit(self, spec: dict) -> dict:
        return self._call("POST", "/v1/jobs", spec, timeout=None)

    def check_job(self, spec: dict) -> dict:
        """Would the daemon take this job (``spec`` without its code)? Refused as a submit would be."""
        return self._call("POST", "/v1/jobs/check", spec)

    def jobs(self, project: str | None = None, state: str | None = None, *, stale: bool = False,
             limit: int | None = None, offset: int = 0, since: float | None = None,
             user: str | None = None) -> list[dict]:
        """Jobs, newest first (archived ones too): ``limit`` of them from ``offset`` (None: every
        one), created at or after ``since`` (unix seconds), submitted by ``user``."""
        return self._call("GET", "/v1/jobs", query={"project": project, "state": state,
                                                    "stale": "1" if stale else None, "limit": limit,
                                                    "offset": offset or None, "since": since, "user": user})

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

    def logs(self, job: str, *, follow: bool = False, offset: int = 0, rank: int | None = None) -> Iterator[bytes]:
        """Raw log lines (``b"<ts> <o|e> <text>\\n"``), following until the job ends; ``rank``:
        a part of a distributed job. Raises when the log stopped before its end frame
        (:mod:`floydd.logframe`): why the daemon said, or :data:`GONE`."""
        query = {"follow": int(follow), "offset": offset, **({"rank": rank} if rank is not None else {})}
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
        it (FLOYD_HOST); ``{"code_tree", "files", "bytes"}`` to submit with. ``progress(sent,
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

    # -- export files between sites (floydd.exchange, floydd.api.exchange) --------------

    @contextlib.contextmanager
    def export(self, *, jobs: list[str] = (), datasets: list[str] = (), key_hex: str,
               kdf: dict | None = None) -> Iterator[tuple[IO[bytes], int | None]]:
        """The export file of ``jobs`` (PROJECT or PROJECT/N) and dataset versions ``datasets``,
        sealed under the export key ``key_hex``: ``(stream, about how many bytes)``. The stream
        raises :data:`GONE` when the daemon stops answering; a file that ends early or with an
        error record is for :class:`floydd.exchange.Reader` to refuse."""
        conn, resp = self._open("POST", "/v1/export", {"jobs": list(jobs), "datasets": list(datasets),
                                                       "key": key_hex, "kdf": kdf or {"kind": "random"}},
                                timeout=None)
        try:
            size = resp.getheader("Floydd-Export-Size")
            yield _Counted(resp, None, None, cut=self._gone), int(size) if size and size.isdigit() else None
        finally:
            conn.close()

    def import_file(self, f: IO[bytes], *, key_hex: str, name: str = "", expect_origin: str | None = None,
                    progress: Progress | None = None) -> dict:
        """Send the export file ``f`` (from its current position) to be verified and imported;
        what it made (``ImportResult``). ``progress(sent, total)`` follows the bytes sent."""
        query = urllib.parse.urlencode({k: v for k, v in (("name", name), ("expect_origin", expect_origin)) if v})
        headers = {"Accept": "application/json", "Content-Type": "application/octet-stream",
                   "Floydd-Export-Key": key_hex}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
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
            raise Unavailable(f"no floydd daemon answers at {self.where} ({exc.strerror})",
                              hint="start one with `floydd start`, or run any `floyd` command to start one") from None
        finally:
            conn.close()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = {"error": {"message": raw.decode(errors="replace").strip() or f"HTTP {resp.status}"}}
        if resp.status >= 400:
            raise from_payload(payload if isinstance(payload, dict) else {}, resp.status)
        return payload


def _job_path(job: str) -> str:
    """``"digits/3"`` -> URL path part; the daemon validates the rest."""
    project, sep, number = str(job).rpartition("/")
    if not sep or not project or not number:
        raise InvalidSpec(f"{job!r} is not a job name",
                          hint="jobs are named PROJECT/NUMBER, e.g. digits/3 (see `floyd status`)")
    return f"{urllib.parse.quote(project, safe='')}/{urllib.parse.quote(number, safe='')}"

