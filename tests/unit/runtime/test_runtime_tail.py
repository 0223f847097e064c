"""Reading job.log from an offset: complete lines only, metric points by FloydHub's rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floydd.runtime.tail import MetricPoint, parse_lines, parse_metrics, read_chunk, scan_metrics


def line(text: str, ts: float = 1.5, stream: str = "o") -> bytes:
    return b"%.6f %s %s\n" % (ts, stream.encode(), text.encode())


def test_only_complete_lines_are_read_and_the_offset_resumes_there(tmp_path):
    path = tmp_path / "job.log"
    assert read_chunk(path, 0).offset == 0  # no file yet
    path.write_bytes(line("a") + line("b") + b"2.000000 o unfinis")
    first = read_chunk(path, 0)
    assert [ln.text for ln in first.lines] == ["a", "b"] and first.offset == len(line("a") + line("b"))
    with open(path, "ab") as f:
        f.write(b"hed\n")
    second = read_chunk(path, first.offset)
    assert [(ln.ts, ln.text) for ln in second.lines] == [(2.0, "unfinished")]
    assert second.offset == path.stat().st_size
    assert read_chunk(path, second.offset).data == b""


def test_a_chunk_limit_still_returns_whole_lines(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(line("x" * 100) * 10)
    chunk = read_chunk(path, 0, limit=250)
    assert chunk.data.endswith(b"\n") and len(chunk.lines) == 2
    huge = read_chunk(path, 0, limit=10)  # one line longer than the limit comes back whole
    assert len(huge.lines) == 1 and huge.lines[0].text == "x" * 100


def test_metric_points_follow_floydhubs_format():
    data = b"".join([
        line(json.dumps({"metric": "loss", "value": 0.31, "step": 120}), ts=10.0),
        line(json.dumps({"metric": "acc", "value": 1}), ts=11.0, stream="e"),
        line('  {"step": 3.0, "value": -2.5e-3, "metric": "lr"}  ', ts=12.0),
        line("the metric is good"),
        line('{"metric": "loss"}'),                              # no value
        line('{"metric": "loss", "value": "0.3"}'),              # not a number
        line('{"metric": "loss", "value": true}'),               # bool is no number
        line('{"metric": "loss", "value": NaN}'),                # not finite
        line('{"metric": "loss", "value": Infinity}'),
        line('{"metric": "loss", "value": 1, "step": 1.5}'),     # step not whole
        line('{"metric": "", "value": 1}'),                      # no name
        line('{"metric": 5, "value": 1}'),
        line('{"metric": "x", "value": 1} trailing'),            # not just a JSON object
        line('["metric", 1]'),
        line('{"metric": "loss", "value": 1e999}'),
        line('{"metric": "%s", "value": 1}' % ("n" * 201)),       # longer than the records allow
        b'garbage "metric" line\n',
    ])
    assert parse_metrics(data) == [MetricPoint("loss", 0.31, 120, 10.0), MetricPoint("acc", 1.0, None, 11.0),
                                   MetricPoint("lr", -0.0025, 3, 12.0)]
    assert MetricPoint("loss", 0.31, 120, 10.0) == ("loss", 0.31, 120, 10.0)  # the row add_metrics takes


def test_malformed_lines_keep_their_text():
    assert [(ln.ts, ln.stream, ln.text) for ln in parse_lines(b"no stamp here\n1.0 e \n")] == \
        [(0.0, "o", "no stamp here"), (1.0, "e", "")]


@given(st.lists(st.tuples(st.text(alphabet=st.characters(blacklist_characters="\n\r\x85\u2028\u2029",
                                                         blacklist_categories=("Cs",)), max_size=40),
                          st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
                          st.one_of(st.none(), st.integers(-10**6, 10**6))), max_size=30))
def test_every_sdk_style_line_is_found_with_its_value(points):
    data = b"".join(line(json.dumps({"metric": n or "m", "value": v} | ({} if s is None else {"step": s})),
                         ts=float(i)) for i, (n, v, s) in enumerate(points))
    assert [(p.name, p.value, p.step, p.ts) for p in parse_metrics(data)] == \
        [(n or "m", v, s, float(i)) for i, (n, v, s) in enumerate(points)]


@pytest.mark.parametrize("bad", [b"1.0 o {\"metric\": \"a\", \"value\": [1]}\n", b"1.0 o {\"metric\"\n",
                                 b"x o {\"metric\": \"a\", \"value\": 1}\n"])
def test_a_broken_metric_line_is_skipped_not_fatal(bad):
    assert parse_metrics(bad + line('{"metric": "ok", "value": 2}')) == [MetricPoint("ok", 2.0, None, 1.5)]


BAD_METRIC_LINES = [
    ('{"metric": "loss", "value": 1, "step": %d}' % 2**70, "the step does not fit in 64 bits"),
    ('{"metric": "loss", "value": 1, "step": %d}' % -(2**63 + 1), "the step does not fit in 64 bits"),
    ('{"metric": "loss", "value": 1, "step": 1e300}', "the step does not fit in 64 bits"),
    ('{"metric": "loss", "value": 1, "step": 1.5}', "the step is not a whole number"),
    ('{"metric": "loss", "value": 1, "step": true}', "the step is not a whole number"),
    ('{"metric": "loss", "value": NaN}', "the value is nan"),
    ('{"metric": "loss", "value": -Infinity}', "the value is -inf"),
    ('{"metric": "loss", "value": 1e999}', "the value is inf"),
    ('{"metric": "loss", "value": %d}' % 10**400, "the value is too large for a float"),
    ('{"metric": "loss", "value": "0.3"}', "the value is not a number"),
    ('{"metric": "loss"}', "the value is missing"),
    ('{"metric": "%s", "value": 1}' % ("n" * 201), "the metric name is not a string of 1 to 200 characters"),
    ('{"metric": ["loss"], "value": 1}', "the metric name is not a string of 1 to 200 characters"),
    ('{"metric": "deep", "value": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{"metric": "loss", "value": 1', "not valid JSON"),
    ('{"metric": "loss", "value": %s}' % ("9" * 5000), "not valid JSON"),  # past Python's int digits
    ('{"metric": "x", "value": 1} trailing', "not a single JSON object"),
]


@pytest.mark.parametrize("text, why", BAD_METRIC_LINES)
def test_a_metric_line_beyond_what_the_records_hold_is_skipped_and_counted_with_why(text, why):
    scan = scan_metrics(line(text) + line('{"metric": "ok", "value": 2, "step": 9223372036854775807}'))
    assert scan.points == [MetricPoint("ok", 2.0, 2**63 - 1, 1.5)]
    assert scan.skipped == 1 and scan.first_skip.startswith(why + ": {")
    assert len(scan.first_skip) < 200  # quotes a piece of the line, not all of it


def test_only_the_first_skip_is_described_and_every_one_is_counted():
    data = b"".join(line(t) for t, _ in BAD_METRIC_LINES) + line('{"metric": "ok", "value": 1}')
    scan = scan_metrics(data)
    assert scan.skipped == len(BAD_METRIC_LINES) and scan.first_skip.startswith(BAD_METRIC_LINES[0][1])
    assert [p.name for p in scan.points] == ["ok"]


def test_lines_that_only_mention_metric_are_neither_points_nor_skips():
    scan = scan_metrics(line('{"kind": "metric", "n": 1}') + line('the "metric" word') + line('["metric", 1]')
                        + b'garbage "metric" line\n')
    assert (scan.points, scan.skipped) == ([], 0)


@given(st.text(max_size=200))
def test_no_printed_text_makes_the_scanner_raise(text):
    for body in (text, '{"metric": ' + text, '{"metric": "m", "value": ' + text + "}"):
        scan = scan_metrics(line(body.replace("\n", " ")))
        assert len(scan.points) + scan.skipped <= 1


def test_json_without_a_metric_key_is_no_metric_line_even_with_text_after_it():
    assert scan_metrics(line('{"event": "metric"} and "metric" again')).skipped == 0
