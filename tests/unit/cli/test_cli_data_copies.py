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


def test_info_says_under_which_store_key_epochs_the_version_is_sealed_here():
    from floydd.cli.data import _sealed
    assert _sealed({"key_epochs": None, "cluster_key_epoch": 2}) == "no copy on this box to look at"
    assert _sealed({"key_epochs": {"2": 5}, "cluster_key_epoch": 2}) == \
        "under key epoch 2, the cluster's newest (5 objects here)"
    assert _sealed({"key_epochs": {"10": 1, "2": 4}, "cluster_key_epoch": 10}) == \
        "4 under epoch 2, 1 under epoch 10 here; the cluster's newest is epoch 10 (the rest is re-sealed in the background)"
