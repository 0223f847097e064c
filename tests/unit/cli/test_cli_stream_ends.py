"""An answer that stops before its end record is the daemon going away, never a short success.

A canned-bytes server on a unix socket answers each request with what a daemon that dies
half-way would have sent; the real :class:`floydd.client.Client` and CLI read it.
"""

from __future__ import annotations

import io
import json
import socket
import tarfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from floydd import logframe
from floydd.cli import data as data_cli
from floydd.cli import jobs as jobs_cli
from floydd.cli.floyd import cli
from floydd.client import GONE, Client
from floydd.errors import InternalError, NotFound, Unavailable

TOKEN = "ab" * 16


def _head(extra: str = "", *, chunked: bool = True, length: int | None = None,
          kind: str = "application/x-ndjson") -> bytes:
    framing = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {length}\r\n"
    return f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n{framing}{extra}\r\n".encode()


def _chunks(*parts: bytes, end: bool) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return body + (b"0\r\n\r\n" if end else b"")


def _ndjson(*events: dict, end: bool = True) -> bytes:
    return _head() + _chunks(*(json.dumps(e).encode() + b"\n" for e in events), end=end)


def _log(*parts: bytes, end: bool = True) -> bytes:
    return _head(f"{logframe.HEADER}: {TOKEN}\r\n", kind="text/plain") + _chunks(*parts, end=end)


class _Canned:
    """Answers the n-th request with the n-th canned bytes, then closes the connection."""

    def __init__(self, path: Path) -> None:
        self.path, self.answers = path, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                conn.sendall(self.answers.pop(0))


@pytest.fixture
def canned(tmp_path):
    server = _Canned(tmp_path / "api.sock")
    yield server
    server.sock.close()


def _client(canned) -> Client:
    return Client(canned.path, log_path=canned.path.parent / "floydd.log")


def _gone(err) -> None:
    assert isinstance(err.value, Unavailable) and err.value.code == GONE
    assert "went away in the middle" in err.value.message and "\n" not in err.value.message
    assert "floydd status" in err.value.hint


# -- the client -------------------------------------------------------------------------

def test_a_stream_with_its_result_is_read_to_the_result(canned):
    canned.answers.append(_ndjson({"progress": [1, 2]}, {"result": {"objects": 2}}))
    assert list(_client(canned).verify()) == [{"progress": [1, 2]}, {"result": {"objects": 2}}]


@pytest.mark.parametrize("answer", [
    _ndjson({"progress": [1, 10]}, end=False),                    # killed between events
    _ndjson({"progress": [1, 10]}),                               # a clean end, but no end record
    _head() + _chunks(b'{"progress": [1, 10]}\n{"resu', end=False),  # killed mid-line
    _head(),                                                      # killed before the first event
], ids=["between-events", "no-end-record", "mid-line", "before-any-event"])
def test_a_stream_that_stops_before_its_end_record_is_the_daemon_gone(canned, answer):
    canned.answers.append(answer)
    with pytest.raises(Unavailable) as err:
        list(_client(canned).verify())
    _gone(err)


def test_the_hint_names_the_daemon_log_when_there_is_one(canned):
    (canned.path.parent / "floydd.log").write_text("")
    canned.answers.append(_ndjson({"progress": [1, 10]}, end=False))
    with pytest.raises(Unavailable) as err:
        list(_client(canned).clone("ds", Path("/tmp/x")))
    assert str(canned.path.parent / "floydd.log") in err.value.hint


def test_an_error_record_is_the_daemons_error(canned):
    canned.answers.append(_ndjson({"error": {"kind": "NotFound", "message": "no ds", "hint": "floyd data ls"}}))
    with pytest.raises(NotFound, match="no ds"):
        list(_client(canned).verify())


def test_a_body_shorter_than_announced_or_no_answer_at_all_is_the_daemon_gone(canned):
    canned.answers += [_head(chunked=False, length=100, kind="application/json") + b'{"pid": 1', b""]
    for _ in range(2):
        with pytest.raises(Unavailable) as err:
            _client(canned).info()
        _gone(err)


def test_a_tar_shorter_than_announced_is_the_daemon_gone(canned, tmp_path):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = 100_000
        tar.addfile(info, io.BytesIO(b"x" * info.size))
    whole = raw.getvalue()
    canned.answers.append(_head(chunked=False, length=len(whole), kind="application/x-tar") + whole[:50_000])
    with pytest.raises(Unavailable) as err:
        _client(canned).fetch_tar("/v1/datasets/tar", tmp_path / "dest", query={"ref": "ds"})
    _gone(err)


def test_a_log_is_read_byte_for_byte_up_to_its_end_frame(canned):
    lines = [b"1.0 o hello\n", b"2.0 e " + TOKEN.encode()[:10] + b" almost the token\n", b"3.0 o no newline"]
    canned.answers.append(_log(*lines, logframe.frame(TOKEN, {"result": {"offset": 99}})))
    assert b"".join(_client(canned).logs("p/1")) == b"".join(lines)


def test_a_log_without_its_end_frame_is_the_daemon_gone(canned):
    canned.answers.append(_log(b"1.0 o hello\n", end=False))
    got = []
    with pytest.raises(Unavailable) as err:
        for line in _client(canned).logs("p/1", follow=True):
            got.append(line)
    _gone(err)
    assert got == [b"1.0 o hello\n"]


def test_a_log_that_ends_with_an_error_frame_raises_what_the_daemon_said(canned):
    away = Unavailable("node b does not answer", hint="floyd nodes")
    canned.answers.append(_log(b"1.0 o hello\n", logframe.frame(TOKEN, away.to_payload())))
    with pytest.raises(Unavailable, match="node b does not answer") as err:
        list(_client(canned).logs("p/1"))
    assert err.value.code != GONE


def test_a_log_answer_without_the_end_header_is_refused_not_trusted(canned):
    canned.answers.append(_head(kind="text/plain") + _chunks(b"1.0 o hello\n", end=True))
    with pytest.raises(InternalError, match=logframe.HEADER):
        list(_client(canned).logs("p/1"))


def test_a_frame_is_found_only_with_its_token():
    frame = logframe.frame(TOKEN, {"result": {"offset": 3}})
    other = logframe.frame("cd" * 16, {"result": {"offset": 3}})
    reader = logframe.unframe([b"abc" + other, b"xyz" + frame, b"after\n"], TOKEN)
    out = []
    with pytest.raises(StopIteration) as stop:
        while True:
            out.append(next(reader))
    assert out == [b"abc" + other, b"xyz"] and stop.value.value == {"result": {"offset": 3}}


# -- the commands -----------------------------------------------------------------------

def _run(monkeypatch, canned, module, *args: str):
    monkeypatch.setattr(module, "connect", lambda **_: _client(canned))
    return CliRunner().invoke(cli, list(args))


def _one_line_error(res) -> None:
    assert res.exit_code == 1, (res.stdout, res.stderr)
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "went away in the middle" in errors[0], res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


def test_verify_cut_short_says_so_and_claims_no_check(monkeypatch, canned):
    canned.answers.append(_ndjson({"progress": [5, 100]}, end=False))
    res = _run(monkeypatch, canned, data_cli, "data", "verify")
    _one_line_error(res)
    assert "checked" not in res.stdout


def test_clone_cut_short_says_so_and_claims_nothing_written(monkeypatch, canned, tmp_path):
    canned.answers.append(_ndjson({"progress": [5, 100]}, end=False))
    res = _run(monkeypatch, canned, data_cli, "data", "clone", "ds", str(tmp_path / "dest"))
    _one_line_error(res)
    assert "written" not in res.stdout


def test_upload_cut_short_says_so(monkeypatch, canned, tmp_path):
    canned.answers.append(_ndjson({"progress": [5, 100]}, end=False))
    res = _run(monkeypatch, canned, data_cli, "data", "upload", str(tmp_path), "--name", "ds")
    _one_line_error(res)


def test_logs_cut_short_says_so(monkeypatch, canned):
    canned.answers.append(_log(b"1.0 o step 1\n", end=False))
    res = _run(monkeypatch, canned, jobs_cli, "logs", "-f", "p/1")
    _one_line_error(res)
    assert res.stdout == "step 1\n"
