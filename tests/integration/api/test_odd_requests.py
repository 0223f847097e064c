"""Odd but well-formed requests are the caller's mistake: a 400 that says what is wrong, never a 500.

Each case was a 500 (or worse) before: numbers past 64 bits reaching a file offset, digits
that ``int()`` takes but are not ASCII (Arabic-Indic, superscripts), NaN and infinite waits,
bodies nested past the JSON decoder's recursion, lone surrogates that killed the raft log,
paths the kernel cannot take, and tar members too long, too deep, or both a file and a folder.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from floydd.cli import data as data_cli
from floydd.cli.floyd import cli
from tests.integration.api._daemon import Api, tar_of

BIG = str(10**30)
JSON = {"Content-Type": "application/json"}
TAR = {"Content-Type": "application/x-tar"}
JOB = {"project": "odd", "command": "true", "code_path": "/nonexistent"}

CASES = {
    # numbers that do not fit, digits that are not ASCII
    "job number past 64 bits": ("GET", f"/v1/jobs/seed/{BIG}", {}, "is not a job name"),
    "Arabic-Indic job number": ("GET", "/v1/jobs/seed/\u0661", {}, "is not a job name"),
    "superscript job number": ("GET", "/v1/jobs/seed/\u00b2", {}, "is not a job name"),
    "log offset past 64 bits": ("GET", "/v1/jobs/seed/1/logs", {"params": {"offset": BIG}}, "offset"),
    "Arabic-Indic log offset": ("GET", "/v1/jobs/seed/1/logs", {"params": {"offset": "\u0661\u0662"}}, "offset"),
    "superscript log rank": ("GET", "/v1/jobs/seed/1/logs", {"params": {"rank": "\u00b2"}}, "rank"),
    "rank past 64 bits": ("GET", "/v1/jobs/seed/1/logs", {"params": {"rank": BIG}}, "rank"),
    "NaN wait": ("GET", "/v1/jobs/seed/1/wait", {"params": {"timeout": "nan"}}, "timeout"),
    "infinite wait": ("GET", "/v1/jobs/seed/1/wait", {"params": {"timeout": "1e400"}}, "timeout"),
    "negative wait": ("GET", "/v1/jobs/seed/1/wait", {"params": {"timeout": "-1"}}, "timeout"),
    "Arabic-Indic wait": ("GET", "/v1/jobs/seed/1/wait", {"params": {"timeout": "\u0661"}}, "timeout"),
    "gpus = 10**30": ("POST", "/v1/jobs", {"json": {**JOB, "gpus": 10**30}}, "64 bits"),
    "gpus past the most a box has": ("POST", "/v1/jobs", {"json": {**JOB, "gpus": 10**6}}, "--gpu"),
    "check: gpus past the most a box has": ("POST", "/v1/jobs/check", {"json": {**JOB, "gpus": 10**6}}, "--gpu"),
    "check: a list, not a job": ("POST", "/v1/jobs/check", {"json": [JOB]}, "JSON object"),
    "restart with gpus = 10**30": ("POST", "/v1/jobs/seed/1/restart", {"json": {"gpus": 10**30}}, "64 bits"),
    "ttl = 10**30": ("POST", "/v1/cluster/tokens", {"json": {"ttl": 10**30}}, "64 bits"),
    "ttl = 1e308": ("POST", "/v1/cluster/tokens", {"json": {"ttl": 1e308}}, "ttl"),
    "ttl = 1e400": ("POST", "/v1/cluster/tokens", {"data": '{"ttl": 1e400}', "headers": JSON}, "number"),
    "ttl = NaN": ("POST", "/v1/cluster/tokens", {"data": '{"ttl": NaN}', "headers": JSON}, "NaN"),
    "dataset version past 64 bits": ("POST", "/v1/datasets/delete", {"json": {"ref": f"mnist:{BIG}"}}, "version"),
    "Arabic-Indic dataset version": ("GET", "/v1/datasets/info", {"params": {"ref": "mnist:\u0661"}}, "version"),
    # a listing's sort and text filter
    "unknown sort key": ("GET", "/v1/jobs", {"params": {"sort": "-bogus"}}, "cannot sort jobs by 'bogus'"),
    "sort by a bare minus": ("GET", "/v1/jobs", {"params": {"sort": "-"}}, "cannot sort jobs"),
    "filter past its length": ("GET", "/v1/jobs", {"params": {"q": "x" * 5000}}, "at most 200"),
    # names and text past their limits
    "long project": ("POST", "/v1/jobs", {"json": {**JOB, "project": "p" * 1000}}, "project name"),
    "long command": ("POST", "/v1/jobs", {"json": {**JOB, "command": "x" * 70000}}, "command"),
    "long message": ("POST", "/v1/jobs", {"json": {**JOB, "message": "m" * 5000}}, "message"),
    "long param value": ("POST", "/v1/jobs", {"json": {**JOB, "params": {"a": "v" * 70000}}}, "--param a"),
    "too many params": ("POST", "/v1/jobs", {"json": {**JOB, "params": {f"p{i}": "1" for i in range(300)}}},
                        "params"),
    "too many mounts": ("POST", "/v1/jobs", {"json": {**JOB, "data": [f"mnist:/in{i}" for i in range(70)]}},
                        "mounts"),
    "long mount point": ("POST", "/v1/jobs", {"json": {**JOB, "data": ["mnist:/" + "a" * 5000]}}, "mount point"),
    "long code_path": ("POST", "/v1/jobs", {"json": {**JOB, "code_path": "/" + "a/" * 3000}}, "code_path"),
    "NUL in code_path": ("POST", "/v1/jobs", {"json": {**JOB, "code_path": "/a\0b"}}, "NUL"),
    "code_path through a file": ("POST", "/v1/jobs", {"json": {**JOB, "code_path": "/etc/passwd/x"}}, "not a folder"),
    "long dataset name": ("GET", "/v1/datasets/info", {"params": {"ref": "m" * 5000}}, "dataset name"),
    "long verify name": ("POST", "/v1/store/verify", {"json": {"name": "m" * 5000}}, "name"),
    "long upload message": ("POST", "/v1/datasets", {"json": {"name": "x", "path": "/nonexistent",
                                                              "message": "m" * 5000}}, "message"),
    "long dest": ("POST", "/v1/datasets/clone", {"json": {"ref": "mnist", "dest": "/" + "a" * 5000}}, "dest"),
    "NUL in dest": ("POST", "/v1/jobs/seed/1/output", {"json": {"dest": "/a\0"}}, "NUL"),
    "too many jobs to compare": ("GET", "/v1/compare", {"params": {"jobs": ",".join(["seed/1"] * 200)}}, "compare"),
    "unknown job state": ("GET", "/v1/jobs", {"params": {"state": "x" * 3000}}, "job state"),
    # bodies that decode to something the rest of the daemon cannot take
    "deeply nested body": ("POST", "/v1/jobs", {"data": "[" * 100000, "headers": JSON}, "nests deeper"),
    "deeply nested field": ("POST", "/v1/jobs", {"data": '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
                                                 "headers": JSON}, "nests deeper"),
    "nested under the decoder's limit": ("POST", "/v1/jobs/seed/1/restart",
                                         {"data": '{"params": ' + "[" * 500 + "]" * 500 + "}", "headers": JSON},
                                         "nests deeper"),
    "lone surrogate in a command": ("POST", "/v1/jobs/seed/1/restart",
                                    {"data": '{"command": "echo \\ud800"}', "headers": JSON}, "surrogate"),
    "lone surrogate in a message": ("POST", "/v1/datasets", {"data": '{"name": "x", "path": "/x", '
                                                                     '"message": "\\udfff"}', "headers": JSON},
                                    "surrogate"),
    "ref that is not text": ("POST", "/v1/datasets/delete", {"json": {"ref": ["mnist"]}}, "ref must be text"),
    "message that is not text": ("POST", "/v1/datasets", {"json": {"name": "x", "path": "/x", "message": {}}},
                                 "message must be text"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_odd_request_is_a_400_that_says_what_is_wrong(api: Api, case: str) -> None:
    method, path, kw, said = CASES[case]
    status, answer, text = api.call(method, path, **kw)
    assert status == 400, text[:500]
    error = answer["error"]
    assert error["code"] and error["hint"] and said in error["message"], error
    assert len(text) < 2000, "the answer repeats the odd input at length"


TARS = {
    "a name of 300 bytes": ([("a" * 300, "file")], "too long"),
    "a path of 6000 bytes": ([("a/" * 3000 + "f", "file")], "too long"),
    "a path 1500 folders deep": ([("a/" * 1500 + "f", "file")], "1501 folders deep"),
    "a folder 1200 deep": ([("/".join(["d"] * 1200), "dir")], "1200 folders deep"),
    "a path the file system cannot take": ([("/".join(["n" * 255] * 15 + ["f" * 230]), "file")],
                                           "too long for this box's file system"),
    "a file, then a file in it": ([("a", "file"), ("a/b", "file")], "as a file and as a folder"),
    "a file, then a folder of its name": ([("a", "file"), ("a", "dir")], "as a file and as a folder"),
    "a name twice": ([("a", "file"), ("a", "file")], "twice"),
}


@pytest.mark.parametrize("path", ["/v1/code", "/v1/datasets/tar"])
@pytest.mark.parametrize("case", list(TARS))
def test_a_tar_with_odd_member_names_is_refused_naming_the_member(api: Api, path: str, case: str) -> None:
    members, said = TARS[case]
    status, answer, text = api.call("POST", path, params={"name": "odd"}, data=tar_of(members), headers=TAR)
    assert status == 400, text[:500]
    assert answer["error"]["code"] == "unsafe_path" and said in answer["error"]["message"], answer


@pytest.mark.parametrize("offset", [2**44 + 1, 2**63 - 1])
def test_a_log_offset_past_any_file_reads_nothing(api: Api, offset: int) -> None:
    status, _, text = api.call("GET", "/v1/jobs/seed/1/logs", params={"offset": str(offset)})
    assert status == 200 and "hello" not in text, text[:500]


def test_a_tar_at_the_limits_is_taken(api: Api) -> None:
    deep = "/".join(["d"] * 255) + "/f"                # 256 names: the deepest path an upload may hold
    status, answer, text = api.call("POST", "/v1/code", data=tar_of([(deep, "file"), ("n" * 255, "file")]),
                                    headers=TAR)
    assert status == 201 and answer["files"] == 2, text[:500]


# -- PROJECT/N/output is a job's output, never an upload ----------------------------------------

def test_an_upload_cannot_take_the_name_of_a_jobs_output(api: Api) -> None:
    folder = api.root / "seed-data"
    status, answer, _ = api.call("POST", "/v1/datasets", json={"name": "seed/1/output", "path": str(folder)})
    assert status == 400 and answer["error"]["code"] == "invalid_name"
    assert "output of job seed/1" in answer["error"]["message"] and "--name seed-1-output" in answer["error"]["hint"]
    status, answer, _ = api.call("POST", "/v1/datasets/tar", params={"name": "mnist/3/output"},
                                 data=tar_of([("a", "file")]), headers=TAR)
    assert status == 400 and "output of job mnist/3" in answer["error"]["message"]
    versions = api.call("GET", "/v1/datasets", params={"name": "seed/1/output"})[1]
    assert [v["ref"] for v in versions] == ["seed/1/output:1"], "the job's own output is still published"
    assert api.call("GET", "/v1/datasets", params={"name": "mnist/3/output"})[1] == []


def test_floyd_data_upload_refuses_an_output_name_before_reading_anything(monkeypatch, tmp_path) -> None:
    def no_daemon(**_):
        raise AssertionError("the CLI asked the daemon")
    monkeypatch.setattr(data_cli, "connect", no_daemon)
    res = CliRunner().invoke(cli, ["data", "upload", str(tmp_path), "--name", "mnist/3/output"])
    assert res.exit_code == 1, res.output
    assert "error: mnist/3/output is the name of the output of job mnist/3" in res.stderr
    assert "--name mnist-3-output" in res.stderr and "Traceback" not in res.stderr


def test_job_listings_page_and_refuse_odd_page_sizes(api):
    status, jobs, _ = api.call("GET", "/v1/jobs", params={"limit": "1"})
    assert status == 200 and [j["id"] for j in jobs] == ["seed/1"]
    assert api.call("GET", "/v1/jobs", params={"limit": "1", "offset": "1"})[1] == []
    assert api.call("GET", "/v1/jobs", params={"since": str(jobs[0]["created"] + 1)})[1] == []
    for params in ({"limit": "0"}, {"offset": "-1"}, {"since": "soon"}, {"limit": "1e3"}):
        status, answer, _ = api.call("GET", "/v1/jobs", params=params)
        assert status == 400 and answer["error"]["hint"], params


def test_a_listing_sorts_and_filters_odd_text_as_text(api):
    assert [j["id"] for j in api.call("GET", "/v1/jobs", params={"q": "SEED/", "sort": "+state"})[1]] == ["seed/1"]
    for odd in ("\x00", "%' OR 1=1 --", "\u0661", "\U0001f600", "*", "\\", "x" * 200, "a\r\nb"):
        status, answer, text = api.call("GET", "/v1/jobs", params={"q": odd, "sort": "-time", "limit": "5"})
        assert status == 200 and answer == [], (odd, text[:300])


def test_a_check_answers_what_the_submit_would_pin_and_commits_nothing(api):
    before = api.call("GET", "/v1/jobs")[1]
    status, answer, text = api.call("POST", "/v1/jobs/check", json={"project": "odd", "command": "true",
                                                                    "data": ["mnist:/input"], "cpus": 0.5})
    assert status == 200, text
    assert answer["ok"] and [(m["ref"], m["mount"]) for m in answer["data"]] == [("mnist:1", "/input")]
    assert len(answer["data"][0]["tree"]) == 64 and answer["cpus"] == 0.5
    assert api.call("GET", "/v1/jobs")[1] == before


def test_a_code_folder_a_thousand_levels_deep_is_refused_plainly(api: Api) -> None:
    import os
    root = api.root / "deep-code"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(1000):         # by descriptor: the path itself is past PATH_MAX
            os.mkdir("d", dir_fd=fd)
            fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
    finally:
        os.close(fd)
    try:
        status, answer, text = api.call("POST", "/v1/jobs", json={**JOB, "code_path": str(root)})
    finally:
        while (root / "d").exists():  # undone level by level (a recursive removal overflows too)
            if (root / "d" / "d").exists():
                os.rename(root / "d" / "d", root / "up")
                os.rmdir(root / "d")
                os.rename(root / "up", root / "d")
            else:
                os.rmdir(root / "d")
    assert status == 400, text[:500]
    assert answer["error"]["code"] == "unsafe_path" and "more than 256 levels deep" in answer["error"]["message"]
    assert ".floydignore" in answer["error"]["hint"]
