"""Screening /output: an entry a snapshot cannot hold is named and skipped; the rest is saved."""

from __future__ import annotations

import os
import socket

import pytest

from floydd.errors import UnsafePath
from floydd.runtime import outputs
from floydd.runtime.outputs import screen
from floydd.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


@pytest.fixture
def output(tmp_path):
    out = tmp_path / "ws" / "output"
    (out / "ckpt").mkdir(parents=True)
    (out / "model.bin").write_bytes(b"weights")
    (out / "ckpt" / "step-1").write_text("1")
    (out / "latest").symlink_to("ckpt/step-1")           # inside: kept
    return out


def _bad_entries(out) -> dict[str, str]:
    os.mkfifo(out / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(out / "ckpt" / "sock"))
    sock.close()
    (out / "passwd").symlink_to("/etc/passwd")            # absolute: outside
    (out / "up").symlink_to("../../..")                   # relative, leaves /output
    (out / "via").symlink_to("up/etc")                    # through a link that leaves
    (out / "back\\slash").write_text("x")                  # a name a tree cannot hold
    return {"pipe": "a FIFO", "ckpt/sock": "a socket", "passwd": "outside /output (to /etc/passwd)",
            "up": "outside /output", "via": "", "back\\slash": "its name cannot be stored"}


def test_a_clean_output_skips_nothing(output):
    assert screen(output).skipped == []


def test_each_entry_a_snapshot_refuses_is_named_with_why(output):
    expected = _bad_entries(output)
    skipped = {s.path: s.why for s in screen(output).skipped}
    assert set(skipped) == set(expected)
    for path, words in expected.items():
        assert words in skipped[path], (path, skipped[path])


def test_the_snapshot_without_them_saves_the_rest(output, store, tmp_path):
    _bad_entries(output)
    with pytest.raises(UnsafePath):          # what happened before: one bad entry, no output at all
        store.snapshot(output)
    screened = screen(output)
    tree = store.snapshot(output, ignore=screened.ignore)
    back = tmp_path / "back"
    store.restore(tree, back)
    assert (back / "model.bin").read_bytes() == b"weights" and (back / "ckpt" / "step-1").read_text() == "1"
    assert os.readlink(back / "latest") == "ckpt/step-1"
    assert sorted(p.name for p in back.iterdir()) == ["ckpt", "latest", "model.bin"]


def test_an_unreadable_file_or_folder_is_skipped(output, monkeypatch):
    (output / "secret").write_text("x")
    (output / "locked").mkdir()
    real_open, real_scandir = os.open, os.scandir

    locked = os.stat(output / "locked").st_ino

    def deny_open(path, *args, **kwargs):  # the tests run as root, who reads everything
        if os.fsdecode(path).endswith("secret"):    # opened by name, beneath its folder's descriptor
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    def deny_scandir(path):                          # a folder is read through its descriptor
        if isinstance(path, int) and os.fstat(path).st_ino == locked:
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)
    monkeypatch.setattr(outputs.os, "open", deny_open)
    monkeypatch.setattr(outputs.os, "scandir", deny_scandir)
    skipped = {s.path: s.why for s in screen(output).skipped}
    assert skipped == {"secret": "it cannot be read (Permission denied)",
                       "locked": "the folder cannot be read (Permission denied)"}


def test_an_output_folder_replaced_by_a_link_is_not_followed(tmp_path):
    out = tmp_path / "output"
    out.symlink_to("/etc")
    screened = screen(out)
    assert screened.everything and "is a link (to /etc)" in screened.skipped[0].why
