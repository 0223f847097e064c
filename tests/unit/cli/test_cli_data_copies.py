"""``floyd data ls`` marks a version short of copies; ``floyd data info`` shows its copies."""

from __future__ import annotations

from click.testing import CliRunner

from floydd.cli import data as data_cli
from floydd.cli.data import _held

ROW = {"name": "mnist", "version": 1, "ref": "mnist:1", "created": 0.0, "size": 10, "files": 1, "message": "",
       "tree": "ab" * 32, "holders": ["a", "b"]}


def test_a_version_short_of_copies_says_which_box_is_silent():
    assert _held({**ROW, "held_by": ["box1", "box2"], "silent_holders": [], "copies": 2, "replicas": 2}) == \
        "  [on box1, box2]"
    assert _held({**ROW, "held_by": ["box1", "box2"], "silent_holders": ["box2"], "copies": 1, "replicas": 2}) == \
        "  [1 of 2 copies: box1; box2 silent]"
    assert _held({**ROW, "held_by": ["box1"], "silent_holders": [], "copies": 1, "replicas": 2}) == \
        "  [1 of 2 copies: box1]"
    assert _held({**ROW, "held_by": [], "silent_holders": [], "copies": 0, "replicas": 2}) == ""


def test_info_prints_the_copies_line(monkeypatch):
    info = {**ROW, "held_by": ["box1", "box2"], "silent_holders": ["box2"], "copies": 1, "replicas": 2,
            "copies_note": "stored on 1 of 2 boxes; the second copy follows", "entries": [], "truncated": False}

    class Client:
        def dataset(self, ref):
            return info
    monkeypatch.setattr(data_cli, "connect", Client)
    out = CliRunner().invoke(data_cli.data, ["info", "mnist:1"]).output
    assert "copies   1 of 2 on box1, box2: stored on 1 of 2 boxes; the second copy follows" in out
