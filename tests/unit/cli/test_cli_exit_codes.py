"""``floyd run -f`` exits with the job's own code; floyd's own outcomes have codes of their own."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from floydd.cli import exits
from floydd.cli.floyd import cli
from floydd.cli.jobs import follow_to_end
from floydd.client import GONE
from floydd.errors import Unavailable


class _FakeClient:
    """Logs two lines, then the job ends as ``job``; or the daemon goes away while following."""

    def __init__(self, job: dict | None = None, gone_in: str = "") -> None:
        self.job, self.gone_in = job, gone_in

    def _gone(self) -> Unavailable:
        return Unavailable("the floydd daemon at /x.sock went away in the middle of this command",
                           code=GONE, hint="check it with `floydd status`; then run the command again")

    def logs(self, key, **_):
        yield b"1.0 o training\n"
        if self.gone_in == "logs":
            raise self._gone()
        yield b"2.0 e done\n"

    def wait(self, key, timeout=None):
        if self.gone_in == "wait":
            raise self._gone()
        return {"id": key, "project": "p", "number": 1, **self.job}


def _follow(capsys, client) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        follow_to_end(client, "p/1")
    out, err = capsys.readouterr()
    return ended.value.code, out, err


@pytest.mark.parametrize("job,code", [
    ({"state": "success", "exit_code": 0}, 0),
    ({"state": "failed", "exit_code": 3}, 3),
    ({"state": "failed", "exit_code": 137, "reason": "killed by SIGKILL"}, 137),
    ({"state": "failed", "exit_code": None, "reason": "dataset ds:1 is damaged"}, exits.ERROR),
    ({"state": "failed", "exit_code": 0, "reason": "saving /output failed"}, exits.ERROR),   # never 0 unless success
    ({"state": "timeout", "exit_code": 143}, exits.TIMEOUT),
    ({"state": "stopped", "exit_code": 0}, exits.STOPPED),
    ({"state": "lost", "exit_code": None}, exits.LOST),
])
def test_run_follow_exits_with_the_jobs_code(capsys, job, code):
    got, out, err = _follow(capsys, _FakeClient(job))
    assert got == code and out == "training\ndone\n"
    assert f"job p/1 {job['state']}" in err


def test_the_codes_of_floyds_own_outcomes_are_distinct_and_documented():
    own = [exits.ERROR, exits.LOST, exits.TIMEOUT, exits.NOT_FOLLOWED, exits.INTERRUPTED, exits.STOPPED]
    assert len(set(own)) == len(own) and exits.OK not in own
    text = CliRunner().invoke(cli, ["--help"]).output
    for code in own + [exits.OK, 2]:
        assert f"\n    {code} " in text, text
    assert "Exit status" in text and "--max-runtime" in text


@pytest.mark.parametrize("where", ["logs", "wait"])
def test_losing_track_of_the_job_is_its_own_code_with_one_line_and_what_to_check(capsys, where):
    got, _out, err = _follow(capsys, _FakeClient(gone_in=where))
    assert got == exits.NOT_FOLLOWED
    lines = err.splitlines()
    assert lines[0].startswith("error: ") and "went away" in lines[0] and len(lines) == 2
    assert "floydd status" in lines[1] and "floyd status p/1" in lines[1]


def test_ctrl_c_while_following_leaves_the_job_running(capsys):
    class Interrupted(_FakeClient):
        def wait(self, key, timeout=None):
            raise KeyboardInterrupt
    got, _out, err = _follow(capsys, Interrupted())
    assert got == exits.INTERRUPTED and "keeps running" in err and "floyd stop p/1" in err
