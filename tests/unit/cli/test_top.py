"""`floyd top` hands over to the TUI process with the same options (the core never imports textual)."""

import os

from click.testing import CliRunner

from floydd.cli import top


def test_top_execs_the_tui_with_its_options(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execv", lambda exe, args: calls.append(args[1:]))
    runner = CliRunner()
    for args in (["--serve"], ["--serve", "127.0.0.1:9000", "--refresh", "2"], []):
        assert runner.invoke(top.top, args).exit_code == 0
    assert calls == [["-m", "floydd.tui", "--refresh", "1.0", "--serve"],
                     ["-m", "floydd.tui", "--refresh", "2.0", "--serve", "127.0.0.1:9000"],
                     ["-m", "floydd.tui", "--refresh", "1.0"]]
