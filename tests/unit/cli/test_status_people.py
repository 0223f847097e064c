"""``floyd status`` shows each job's owner and asks the daemon for one person's jobs
(``--user NAME``, ``--mine``); ``floyd nodes`` names who holds each GPU."""

from __future__ import annotations

from click.testing import CliRunner

from floydd.cli import jobs as jobs_cli
from floydd.cli.floyd import cli
from floydd.cli.nodes import _holder


def _job(key: str, user: str) -> dict:
    project, _, number = key.partition("/")
    return {"id": key, "project": project, "number": int(number), "state": "running", "user": user, "resources": {"gpus": 1}, "gpus": [0], "node": "box1",
            "parts": [], "started": None, "ended": None, "metrics": {}, "message": ""}


class _Client:
    def __init__(self) -> None:
        self.asked: list = []
        self.sorted: list = []

    def jobs(self, project=None, **kw):
        self.asked.append(kw.get("user"))
        self.sorted.append((kw.get("sort"), kw.get("q")))
        every = [_job("p/2", "bob"), _job("p/1", "alice")]
        return [j for j in every if kw.get("user") in (None, j["user"])]

    def whoami(self) -> dict:
        return {"person": "alice", "node": "n1"}


def _status(monkeypatch, *args: str) -> tuple[_Client, object]:
    client = _Client()
    monkeypatch.setattr(jobs_cli, "connect", lambda: client)
    return client, CliRunner().invoke(cli, ["status", "--all", *args])


def test_the_owner_column_shows_who_submitted_each_job(monkeypatch):
    client, res = _status(monkeypatch)
    assert res.exit_code == 0, res.output
    header, _rule, *rows = res.output.splitlines()
    assert header.split()[:3] == ["JOB", "STATE", "OWNER"]
    assert [r.split()[2] for r in rows] == ["bob", "alice"] and client.asked == [None]


def test_user_and_mine_ask_the_daemon_for_one_persons_jobs(monkeypatch):
    client, res = _status(monkeypatch, "--user", "bob")
    assert res.exit_code == 0 and client.asked == ["bob"] and "p/1" not in res.output
    client, res = _status(monkeypatch, "--mine")
    assert res.exit_code == 0 and client.asked == ["alice"] and "p/2" not in res.output
    client, res = _status(monkeypatch, "--mine", "--user", "bob")
    assert res.exit_code != 0 and "--mine and --user" in res.output and "Traceback" not in res.output


def test_sort_and_filter_are_asked_of_the_daemon_and_checked_first(monkeypatch):
    client, res = _status(monkeypatch, "--sort", "-time", "--filter", " Bert ")
    assert res.exit_code == 0 and client.sorted == [("-time", "bert")], res.output
    client, res = _status(monkeypatch)
    assert client.sorted == [(None, None)]                      # newest first: the daemon's own order
    client, res = _status(monkeypatch, "--sort", "size")
    assert res.exit_code != 0 and "cannot sort jobs by 'size'" in res.output and client.sorted == []
    assert "Traceback" not in res.output
    client, res = _status(monkeypatch, "--filter", "x" * 300)
    assert res.exit_code != 0 and "at most 200" in res.output and client.sorted == []


def test_a_gpu_holder_is_named_by_job_and_person():
    assert _holder({"job": "p/3", "user": "alice"}) == "p/3 (alice)"
    assert _holder({"job": "p/3", "user": None}) == "p/3"
    assert _holder({"job": None}) == "free"
