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
from floydd.model import format_size
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


# -- the cap (max_log_mb, issue 20) ------------------------------------------------------------------

def _capped(tmp_path, cap, before=b""):
    path = tmp_path / "job.log"
    path.write_bytes(before)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    return LogWriter(fd, cap), path, fd


def test_the_log_stops_at_its_cap_on_a_whole_line_and_says_so_then_counts_what_was_dropped(tmp_path):
    writer, path, fd = _capped(tmp_path, 1000, before=b"1.000000 e building an environment\n")
    line = b"x" * 99                                     # 100 bytes with its newline, 118 with its stamp
    for i in range(100):
        writer.add(b"o", line + b"\n", 10.0 + i)
        writer.write()
    assert writer.capped
    writer.flush_partial(200.0)
    writer.finish(200.0)
    writer.write()
    os.close(fd)
    data = path.read_bytes()
    kept, notes = data.split(b" e floydd: ")[0], data.split(b"\n")
    logged = [ln for ln in notes if ln.endswith(b" o " + line)]
    assert len(kept) <= 1000 and len(logged) == (1000 - 36) // 118    # the environment's line counts too
    assert b"reached its 1000 B cap (max_log_mb); later lines are dropped and counted" in data
    dropped = 100 - len(logged)
    assert notes[-2].endswith(f"floydd: {dropped:,} lines ({format_size(dropped * 100)}) dropped: the job's "
                              "log reached its 1000 B cap (max_log_mb)".encode()), notes[-2]
    assert (writer.dropped_lines, writer.dropped_bytes) == (dropped, dropped * 100)


def test_one_burst_that_crosses_the_cap_keeps_its_lines_that_fit_and_counts_the_rest(tmp_path):
    writer, path, fd = _capped(tmp_path, 200)
    writer.add(b"o", b"".join(b"line %03d\n" % i for i in range(50)), 5.0)   # 20 bytes a stamped line
    writer.finish(6.0)
    writer.write()
    os.close(fd)
    got = [ln.text for ln in parse_lines(path.read_bytes()) if ln.stream == "o"]
    assert got == [f"line {i:03d}" for i in range(10)]                         # 10 * 20 = 200: the cap
    assert (writer.dropped_lines, writer.dropped_bytes) == (40, 40 * 9)


def test_past_the_cap_the_last_line_of_each_metric_is_kept_and_written_at_the_end(tmp_path):
    writer, path, fd = _capped(tmp_path, 300)
    for step in range(2000):
        burst = b'{"metric": "loss", "value": %d, "step": %d}\n' % (step, step)
        if step % 100 == 0:
            burst += b'noise\n{"metric": "acc", "value": %d, "step": %d}\n' % (-step, step)
        writer.add(b"o", burst, 1000.0 + step)
        writer.write()
    writer.add(b"e", b'{"metric": "' + b"n" * 2000 + b'", "value": 1}\n', 4000.0)   # too long to keep
    writer.finish(5000.0)
    writer.write()
    os.close(fd)
    data = path.read_bytes()
    assert len(data) < 300 + 1000
    points = {name: [(p.value, p.step, p.ts) for p in parse_metrics(data) if p.name == name] for name in ("loss", "acc")}
    assert points["loss"][-1] == (1999.0, 1999, 2999.0) and points["acc"][-1] == (-1900.0, 1900, 2900.0)
    assert len(points["loss"]) < 10                      # the series stops at the cap: only the last is added
    assert b"n" * 2000 not in data


def test_at_most_keep_metrics_names_are_kept_past_the_cap(tmp_path):
    from floydd.agent.capture import KEEP_METRICS
    writer, path, fd = _capped(tmp_path, 10)
    for i in range(KEEP_METRICS + 50):
        writer.add(b"o", b'{"metric": "m%d", "value": 1}\n' % i, 1.0)
    writer.finish(2.0)
    writer.write()
    os.close(fd)
    assert len({p.name for p in parse_metrics(path.read_bytes())}) == KEEP_METRICS


def test_an_uncapped_writer_never_drops(tmp_path):
    writer, path, fd = _capped(tmp_path, None)
    writer.add(b"o", b"y" * 100 + b"\n", 1.0)
    writer.finish(2.0)
    writer.write()
    os.close(fd)
    assert path.read_bytes() == b"1.000000 o " + b"y" * 100 + b"\n" and writer.dropped_lines == 0


@given(st.lists(st.tuples(st.sampled_from([b"o", b"e"]), st.binary(max_size=300).map(lambda b: b.replace(b"m", b"."))),
                max_size=20), st.integers(min_value=0, max_value=3000))
def test_a_capped_log_is_a_prefix_of_the_uncapped_one_and_every_line_is_logged_or_counted(tmp_path_factory, bursts,
                                                                                          cap):
    folder = tmp_path_factory.mktemp("cap")
    logs = {}
    for name, limit in (("all", None), ("capped", cap)):
        path = folder / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        writer = LogWriter(fd, limit)
        for i, (stream, data) in enumerate(bursts):
            writer.add(stream, data, 1.0 + i)
        writer.flush_partial(100.0)
        writer.finish(100.0)
        writer.write()
        os.close(fd)
        logs[name] = (path.read_bytes(), writer)
    everything, _ = logs["all"]
    capped, writer = logs["capped"]
    body = capped.split(b" e floydd: ")[0]
    body = body[:body.rfind(b"\n") + 1] if writer.capped else body
    assert everything.startswith(body) and len(body) <= cap
    assert _lines(body) + writer.dropped_lines == _lines(everything)
    assert writer.capped == (len(everything) > cap)


def _lines(log: bytes) -> int:
    """Lines of a job.log: ended by b"\n" alone (a job's \r or \x1c is part of its line)."""
    return log.count(b"\n") + (1 if log and not log.endswith(b"\n") else 0)
