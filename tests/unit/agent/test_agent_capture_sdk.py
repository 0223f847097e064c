"""Log capture formatting and the in-job SDK."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floydd.agent import sdk
from floydd.agent.capture import MAX_PARTIAL, LogWriter
from floydd.runtime.tail import parse_lines, parse_metrics, scan_metrics


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "job.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    yield LogWriter(fd), path
    os.close(fd)


def test_a_burst_is_one_stamp_per_line_and_partial_lines_wait(log):
    writer, path = log
    writer.add(b"o", b"one\ntwo\nthr", 10.5)
    writer.add(b"e", b"warn\n", 11.0)
    writer.write()
    assert path.read_bytes() == b"10.500000 o one\n10.500000 o two\n11.000000 e warn\n"
    writer.add(b"o", b"ee\n\nlast", 12.0)
    writer.flush_partial(13.0)
    writer.write()
    assert path.read_bytes().splitlines()[3:] == [b"12.000000 o three", b"12.000000 o ", b"13.000000 o last"]


def test_streams_keep_their_own_partial_line(log):
    writer, path = log
    writer.add(b"o", b"out-", 1.0)
    writer.add(b"e", b"err-", 1.0)
    writer.add(b"o", b"done\n", 2.0)
    writer.add(b"e", b"done\n", 2.0)
    writer.write()
    assert [(ln.stream, ln.text) for ln in parse_lines(path.read_bytes())] == [("o", "out-done"), ("e", "err-done")]


def test_a_line_that_never_ends_is_cut_so_memory_stays_bounded(log):
    writer, path = log
    for _ in range(3):
        writer.add(b"e", b"\r 10%" * (MAX_PARTIAL // 8), 1.0)
    writer.write()
    lines = path.read_bytes().split(b"\n")[:-1]
    assert len(lines) >= 1 and all(len(ln) <= 2 * MAX_PARTIAL for ln in lines)


@given(st.lists(st.tuples(st.sampled_from([b"o", b"e"]), st.binary(max_size=200)), max_size=20))
def test_captured_bytes_come_back_exactly_line_by_line(tmp_path_factory, bursts):
    path = tmp_path_factory.mktemp("cap") / "job.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    writer = LogWriter(fd)
    for i, (stream, data) in enumerate(bursts):
        writer.add(stream, data, 1.0 + i)
    writer.flush_partial(100.0)
    writer.write()
    os.close(fd)
    lines = [ln.split(b" ", 2) for ln in path.read_bytes().split(b"\n")[:-1]]
    assert all(float(ts) >= 1.0 for ts, _, _ in lines)
    for stream in (b"o", b"e"):
        sent = b"".join(d for s, d in bursts if s == stream)
        expected = sent if not sent or sent.endswith(b"\n") else sent + b"\n"
        assert b"".join(text + b"\n" for _, s, text in lines if s == stream) == expected


def test_sdk_prints_floydhubs_metric_line_and_flushes(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    sdk.log("loss", 0.31, step=120)
    sdk.log("acc", 1)
    lines = out.getvalue().splitlines()
    assert json.loads(lines[0]) == {"metric": "loss", "value": 0.31, "step": 120}
    assert json.loads(lines[1]) == {"metric": "acc", "value": 1}
    points = parse_metrics(b"".join(b"1.000000 o %s\n" % ln.encode() for ln in lines))
    assert [(p.name, p.value, p.step) for p in points] == [("loss", 0.31, 120), ("acc", 1.0, None)]


@pytest.mark.parametrize("name,value,step,error", [
    ("loss", float("nan"), None, ValueError),
    ("loss", math.inf, None, ValueError),
    ("loss", "0.3", None, TypeError),
    ("loss", True, None, TypeError),
    ("loss", None, None, TypeError),
    ("loss", 0.3, 1.5, TypeError),
    ("loss", 0.3, True, TypeError),
    ("", 0.3, None, ValueError),
    (3, 0.3, None, TypeError),
    ("n" * 201, 0.3, None, ValueError),        # what the node would skip, refused where it is printed
    ("loss", 10**400, None, ValueError),
    ("loss", 0.3, 2**63, ValueError),
    ("loss", 0.3, -(2**63) - 1, ValueError),
])
def test_sdk_rejects_what_is_not_a_metric(name, value, step, error):
    with pytest.raises(error):
        sdk.log(name, value, step)


def test_sdk_imports_nothing_heavy():
    code = ("import sys; import floydd.agent.sdk; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('aiohttp', 'psutil', 'asyncio', 'sqlite3', 'sqlite_utils', 'floydd.store', 'cryptography') "
            "or m.startswith(('floydd.runtime', 'floydd.records', 'floydd.store'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


def test_sdk_lines_at_the_limits_are_recorded_not_skipped():
    lines = [sdk.metric_line("n" * 200, 1e308, 2**63 - 1), sdk.metric_line("m", -(10**300), -(2**63))]
    assert scan_metrics(b"".join(b"1.000000 o %s\n" % ln.encode() for ln in lines)).skipped == 0


def test_a_write_cut_short_by_a_full_disk_keeps_the_rest_queued_and_drop_forgets_it(log, monkeypatch):
    writer, path = log
    writer.add(b"o", b"first\nsecond\n", 1.0)
    real = os.write
    calls = []

    def full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data[:5]))
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        writer.write()
    monkeypatch.setattr(os, "write", real)
    writer.drop()
    writer.write()
    assert path.read_bytes() == b"1.000"  # what went out stays; nothing more after drop()
