"""`floyd top --serve` without textual-serve (an optional extra) says how to get it."""

import importlib.util
import os

from click.testing import CliRunner

from floydd.cli import top


def test_serve_without_textual_serve_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "textual_serve" else real(name, *a))
    monkeypatch.setattr(os, "execv", lambda *a: (_ for _ in ()).throw(AssertionError("must not start the TUI")))
    res = CliRunner().invoke(top.top, ["--serve"])
    assert res.exit_code == 1
    assert "error: floyd top --serve needs textual-serve" in res.output
    assert "pip install 'floydd[serve]'" in res.output
    assert "Traceback" not in res.output
