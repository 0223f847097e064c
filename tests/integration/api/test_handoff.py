"""Open files handed to the daemon (SCM_RIGHTS, :mod:`floydd.api.handoff`): what is taken, what
is refused and said so, tickets that are the sender's only and used once, and an export and an
import through a real daemon on its unix socket that never stream the file in a request."""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from floydd.api.handedio import FileOut
from floydd.api.handoff import READ, WRITE, Handoffs
from floydd.bundle import ExportKey, Reader
from floydd.cli import exchange as cli_exchange
from floydd.cli.floyd import cli as floyd_cli
from floydd.client import Client
from floydd.config import preset_for_tests
from floydd.connection import Connection, handoff_path
from floydd.errors import Forbidden, UserError
from tests.harness.inprocess import running
from tests.harness.wait import wait_until, wait_until_async


@pytest.fixture
async def handoffs(tmp_path):
    sock = tmp_path / "api.sock"
    h = Handoffs(handoff_path(sock), ttl=30.0, per_uid=3)
    assert h.start(gid=None)
    assert handoff_path(sock).stat().st_mode & 0o777 == 0o600
    try:
        yield h, Connection(sock)
    finally:
        h.close()
    assert not handoff_path(sock).exists()


async def _hand(conn: Connection, fd: int, mode: str) -> str | None:
    return await asyncio.to_thread(conn.hand_over, fd, mode)


async def test_an_empty_file_is_handed_for_writing_taken_once_and_by_its_sender_only(handoffs, tmp_path):
    h, conn = handoffs
    with open(tmp_path / "out", "xb") as f:
        ticket = await _hand(conn, f.fileno(), WRITE)
    assert ticket and h.waiting == 1                        # the CLI closed its copy: the daemon's is open
    with pytest.raises(Forbidden):
        h.take(ticket, os.getuid() + 1, WRITE)              # another uid: refused, and still waiting
    with pytest.raises(Forbidden):
        h.take(ticket, os.getuid(), READ)                   # handed for another use
    handed = h.take(ticket, os.getuid(), WRITE)
    fd = handed.claim()
    try:
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC   # no job the daemon starts inherits it
        os.write(fd, b"written by the daemon")
    finally:
        os.close(fd)
    assert (tmp_path / "out").read_bytes() == b"written by the daemon"
    with pytest.raises(UserError, match="not waiting"):
        h.take(ticket, os.getuid(), WRITE)                  # once
    handed.close()                                          # claimed: not closed twice
    with pytest.raises(UserError, match="over before"):
        handed.claim()


async def test_what_cannot_be_written_or_read_as_a_file_is_refused_and_the_cli_falls_back(handoffs, tmp_path):
    h, conn = handoffs
    (tmp_path / "full").write_bytes(b"something already here")
    r, w = os.pipe()
    try:
        with open(tmp_path / "full", "r+b") as full, open(tmp_path / "full", "rb") as ro:
            for fd, mode in ((w, WRITE), (r, READ), (full.fileno(), WRITE), (ro.fileno(), WRITE), (ro.fileno(), "x")):
                assert await _hand(conn, fd, mode) is None, (fd, mode)
            assert await _hand(conn, ro.fileno(), READ)     # a file to read is read from where it is
    finally:
        os.close(r)
        os.close(w)
    assert h.waiting == 1


async def test_two_files_at_once_and_too_many_waiting_are_refused_saying_why(handoffs, tmp_path):
    h, conn = handoffs
    paths = [tmp_path / f"f{i}" for i in range(5)]
    files = [open(p, "xb") for p in paths]
    try:
        def raw(fds: list[int]) -> str:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(h.path))
                socket.send_fds(s, [WRITE.encode()], fds)
                return s.recv(200).decode()
        assert (await asyncio.to_thread(raw, [files[0].fileno(), files[1].fileno()])) == "refused hand one file at a time\n"
        for f in files[:3]:
            assert await _hand(conn, f.fileno(), WRITE)
        assert (await asyncio.to_thread(raw, [files[3].fileno()])).startswith("refused 3 files of yours are waiting")
    finally:
        for f in files:
            f.close()
    assert h.waiting == 3


async def test_a_file_not_taken_in_time_is_closed(tmp_path):
    sock = tmp_path / "api.sock"
    h = Handoffs(handoff_path(sock), ttl=0.2)
    assert h.start(gid=None)
    try:
        with open(tmp_path / "out", "xb") as f:
            ticket = await _hand(Connection(sock), f.fileno(), WRITE)
        assert h.waiting == 1
        await wait_until_async(lambda: h.waiting == 0, 5, what="the ticket to expire")
        with pytest.raises(UserError, match="not waiting"):
            h.take(ticket, os.getuid(), WRITE)
    finally:
        h.close()


def test_no_handoff_over_tcp_or_to_a_daemon_without_the_socket(tmp_path):
    with open(tmp_path / "out", "xb") as f:
        assert Connection(address="127.0.0.1:9").hand_over(f.fileno(), WRITE) is None
        assert Connection(tmp_path / "nothing.sock").hand_over(f.fileno(), WRITE) is None


def test_an_export_and_an_import_through_a_real_daemon_go_by_the_handed_file(tmp_path):
    config = preset_for_tests(tmp_path / "state", dev_fake_gpus="1", sandbox="none")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(os.urandom(3 << 20))
    (data / "b.csv").write_text("x,y\n" * 50_000)
    key = ExportKey.new()
    with running(config) as client:
        for _ in client.upload(data, "mnist"):
            pass
        out = tmp_path / "mnist.floydx"
        with open(out, "xb") as f:
            ticket = client.hand_over(f.fileno(), WRITE)
            assert ticket
            events = list(client.export_into(ticket, datasets=["mnist:1"], key_hex=key.hex))
        assert events[-1]["result"]["bytes"] == out.stat().st_size
        assert any("progress" in e for e in events)
        with open(out, "rb") as f:
            reader = Reader(f, key, where=out.name)
            for _ in reader.parts():
                pass
        assert reader.manifest["contents"]["datasets"] == ["mnist:1"]
        # a ticket is used once: the same request again is refused, nothing written
        with pytest.raises(UserError, match="not waiting"):
            list(client.export_into(ticket, datasets=["mnist:1"], key_hex=key.hex))
        with open(out, "rb") as f:
            ticket = client.hand_over(f.fileno(), READ)
            events = list(client.import_handed(ticket, key_hex=key.hex, name=out.name))
        result = events[-1]["result"]
        assert result["datasets"][0]["origin_ref"] == "mnist:1", result
        # the handed file was closed by the daemon: none of ours is left open there
        assert not [p for p in Path("/proc/self/fd").iterdir() if _target(p) == str(out)]


def _target(p: Path) -> str:
    try:
        return os.readlink(p)
    except OSError:
        return ""


def test_an_export_that_fails_its_check_while_it_is_written_stops_there_and_leaves_no_file(tmp_path, monkeypatch):
    """The CLI checks the file as the daemon writes it: a record that is not what the format
    allows is refused while the daemon still writes (here it would wait 30 s after it, until
    the CLI hangs up), the export stops there, and neither the file nor its partial is left."""
    config = preset_for_tests(tmp_path / "state", dev_fake_gpus="1", sandbox="none")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(os.urandom(12 << 20))
    seen = {"records": 0, "closed": None, "until": None}
    write, close = FileOut.write, FileOut.close

    def damaging_write(self, chunk) -> None:
        if isinstance(chunk, memoryview) and len(chunk) > 64 << 10:
            seen["records"] += 1
            if seen["records"] == 2:
                chunk[0] = 0x7F                         # flags no reader takes: "record 1 is malformed"
                seen["until"] = time.monotonic() + 30
        write(self, chunk)
        while seen["until"] is not None and time.monotonic() < seen["until"]:
            self._progress(self.written)               # raises once the CLI hung up
            time.sleep(0.02)

    def recorded_close(self, *, sync: bool) -> None:
        seen["closed"] = "fsynced" if sync else "abandoned"
        close(self, sync=sync)
    monkeypatch.setattr(FileOut, "write", damaging_write)
    monkeypatch.setattr(FileOut, "close", recorded_close)
    dest = tmp_path / "out" / "mnist.floydx"
    dest.parent.mkdir()
    with running(config) as client:
        for _ in client.upload(data, "mnist"):
            pass
        monkeypatch.setattr(cli_exchange, "connect", lambda **_: client)
        started = time.monotonic()
        res = CliRunner().invoke(floyd_cli, ["data", "export", "mnist:1", "--to", str(dest),
                                             "--key-file", str(tmp_path / "k")])
        assert res.exit_code != 0 and "is damaged in part 0" in res.output and "record 1 is malformed" in res.output, \
            res.output
        assert time.monotonic() - started < 20           # refused while the daemon still wrote
        wait_until(lambda: seen["closed"] is not None, 30, what="the daemon to end the export")
    assert seen["closed"] == "abandoned"                 # it stopped there: no fsync, no trailer
    assert list(dest.parent.iterdir()) == []             # neither the file nor its partial
