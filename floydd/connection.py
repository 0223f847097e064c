"""How the client reaches a daemon: its unix socket (a shared socket folder checked first),
TCP, or TLS pinned to the cluster's CA and to the box ``floyd login`` met; requests, JSON
answers, NDJSON streams, files sent and read in blocks with progress, and the daemon's errors
raised as the :mod:`floydd.errors` class it raised. :class:`floydd.client.Client` is the API
on top.

Over TLS with a :class:`~floydd.security.boxpin.Pin`, every connection checks the server's
certificate (the pinned node, not revoked: :func:`floydd.security.boxpin.admit`) right after
the handshake, before a byte of the request, its token included, is written
(:class:`_PinnedHTTPSConnection`); and an answer whose ``Floydd-Trust`` differs from the
pin's makes it ask the box for the lab's members and revocations again (``on_pin`` is told,
so that the login keeps them).

Every streamed answer ends with an explicit end record; an answer that stops before it means
the daemon died mid-command, raised as :class:`~floydd.errors.Unavailable` with code
:data:`GONE` (:meth:`Connection._gone`), never taken as a short but complete answer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import urllib.parse
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

from floydd.errors import InternalError, Unauthorized, Unavailable, from_payload
from floydd.security.owned_dirs import is_shared_socket, open_owned_dir, socket_folder_hint

if TYPE_CHECKING:
    from floydd.security.boxpin import Pin

__all__ = ["Connection", "Progress", "OnPin", "GONE"]

GONE = "daemon_gone"
"""The code of the error raised when the daemon stops answering in the middle of an answer."""

OnPin = Callable[["Pin", str], object]
"""Told ``(pin, why)`` when the pin changes: ``"adopted"`` (a login of an older floyd pinned
the box that answered) or ``"learned"`` (the box's members and revocations, asked again)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = unix_connect(self._path, self.timeout)


def unix_connect(path: str, timeout: float | None) -> socket.socket:
    """A connected unix socket to ``path``. A socket under the temp dir is talked to only when
    its folder is ours and 0700 (another local user may have made the folder first and put
    their own socket there); it is reached through the descriptor of the folder that was checked."""
    folder_fd = None
    if is_shared_socket(Path(path)):
        folder = Path(path).parent
        folder_fd = open_owned_dir(folder, hint=socket_folder_hint(folder))
        path = f"/proc/self/fd/{folder_fd}/{Path(path).name}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if timeout is not None:
        sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    finally:
        if folder_fd is not None:
            os.close(folder_fd)
    return sock


def handoff_path(socket_path: Path) -> Path:
    """The daemon's socket that takes open files from a local CLI (:mod:`floydd.api.handoff`),
    beside its API socket."""
    return socket_path.with_name(f"{socket_path.stem}-files{socket_path.suffix or '.sock'}")


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose ``connect`` (which http.client calls before it writes the request it has
    buffered) hands the server's certificate to ``check`` and closes the connection if that
    raises: a refused server never reads a byte of the request."""

    def __init__(self, host: str, port: int, *, timeout: float | None, context: ssl.SSLContext,
                 check: Callable[[bytes], None]) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._check = check

    def connect(self) -> None:
        super().connect()
        try:
            self._check(self.sock.getpeercert(binary_form=True) or b"")
        except BaseException:
            self.sock.close()
            self.sock = None
            raise


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



class Connection:
    """One daemon, on a unix socket path or ``host:port``; ``log_path``: where that daemon
    logs, when known (named in the hint when it goes away). :class:`floydd.client.Client`
    adds the API's calls."""

    def __init__(self, socket_path: Path | None = None, *, address: str | None = None,
                 token: str | None = None, timeout: float | None = 30.0, log_path: Path | None = None,
                 ca_pem: bytes | None = None, pin: Pin | None = None, on_pin: OnPin | None = None) -> None:
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
        self.pin = pin
        """With ``ca_pem``: the box the login pinned (None: any box that CA signed, as ``floyd
        login`` itself does before it pins one)."""
        self.on_pin = on_pin
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


    def hand_over(self, fd: int, mode: str) -> str | None:
        """Hand the open file ``fd`` to the daemon for ``mode`` (``"w"``: it writes into the
        empty file; ``"r"``: it reads it), over the socket beside its API's
        (:mod:`floydd.api.handoff`): the ticket a request names the file by. None where it
        cannot be handed (TCP or TLS, a daemon without that socket, a file it refuses: a pipe,
        say); the file then travels in the request."""
        if self.socket_path is None:
            return None
        try:
            sock = unix_connect(os.fspath(handoff_path(Path(self.socket_path))), 10.0)
        except OSError:
            return None
        try:
            with sock:
                socket.send_fds(sock, [mode.encode()], [fd])
                answer = sock.recv(200).decode(errors="replace")
        except OSError:
            return None
        kind, _, ticket = answer.strip().partition(" ")
        return ticket if kind == "ticket" and ticket else None

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
        if self.pin is None:
            return http.client.HTTPSConnection(host, int(port), timeout=timeout, context=self._tls)
        return _PinnedHTTPSConnection(host, int(port), timeout=timeout, context=self._tls, check=self._check_box)

    def _check_box(self, der: bytes) -> None:
        """The pinned-box check of a server that passed the handshake (module docstring)."""
        from floydd.security.boxpin import admit, presented
        try:
            seen = presented(der)
        except ValueError:
            raise Unauthorized(f"the server at {self.address} presented no certificate floyd can read; no token was "
                               "sent", code="wrong_box", hint="tell the lab's admin") from None
        pin = admit(self.pin, seen)
        if pin is not self.pin:
            self.pin = pin
            if self.on_pin is not None:
                self.on_pin(pin, "adopted")

    def _learn(self, resp: http.client.HTTPResponse) -> None:
        """After an answer of the pinned box: if its ``Floydd-Trust`` is news, ask it for the
        lab's members and revocations (``GET /v1/ca``, on a connection checked like any other)
        and keep them. Best effort: a failure leaves the pin as it was, to try next time."""
        from floydd.security.boxpin import TRUST_HEADER
        digest = resp.getheader(TRUST_HEADER)
        if self.pin is None or not digest or digest == self.pin.trust.digest:
            return
        from floydd.security.pinning import ACCEPT_CA, read_ca_answer
        conn = self._connection(self.timeout)
        try:
            conn.request("GET", "/v1/ca", headers={"Accept": ACCEPT_CA})
            answer = conn.getresponse()
            body = answer.read(1 << 20)
            if answer.status != 200:
                return
            pem, trust = read_ca_answer(body, answer.getheader("Content-Type", ""))
        except (OSError, http.client.HTTPException, Unauthorized):
            return
        finally:
            conn.close()
        if pem and trust.digest:
            self.pin = self.pin.learned(trust)
            if self.on_pin is not None:
                self.on_pin(self.pin, "learned")

    def _open(self, method: str, path: str, body: Any = None, *, query: dict | None = None,
              timeout: float | None = None, raw: _Counted | None = None, headers: dict | None = None,
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        if query:
            clean = {k: v for k, v in query.items() if v is not None}
            if clean:
                path += "?" + urllib.parse.urlencode(clean)
        headers = {**self._headers(), **(headers or {})}
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
            raise self._absent(exc) from None
        except socket.timeout:
            conn.close()
            raise self._slow() from None
        except Unauthorized:
            conn.close()                # not the pinned box (boxpin.admit): the token was never sent
            raise
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
            raise _error(raw, resp.status)
        if self.pin is not None:
            self._learn(resp)
        return conn, resp

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _absent(self, exc: OSError) -> Unavailable:
        return Unavailable(f"no floydd daemon answers at {self.where} ({exc.strerror})",
                           hint="start one with `floydd start`, or run any `floyd` command to start one")

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


def _error(raw: bytes, status: int) -> Exception:
    """The error a daemon answered with (its JSON, or its text where it sent none)."""
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = {"error": {"message": raw.decode(errors="replace").strip() or f"HTTP {status}"}}
    return from_payload(payload if isinstance(payload, dict) else {}, status)
