"""A rerun's /output starts as the last attempt's (restored once per attempt, writable), and a
checkpoint is taken only of an /output that holds something new."""

from __future__ import annotations

import os

import pytest

from floydd.model import Run
from floydd.runtime import checkpoint
from floydd.runtime.workspace import prepare, release_inputs
from floydd.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def _job(attempt: int) -> Run:
    return Run(project="p", number=1, state="starting", attempt=attempt, code_tree=None, data=())


def test_a_rerun_starts_from_the_last_output_writable_and_a_new_attempt_forgets_it(store, tmp_path):
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "step").write_text("7")
    os.chmod(src / "sub" / "step", 0o400)
    tree = str(store.snapshot(src))
    ws = tmp_path / "ws"
    prepare(ws, _job(2), store, resume=tree)
    step = ws / "output" / "sub" / "step"
    assert step.read_text() == "7" and os.access(step, os.W_OK)
    step.write_text("8")                                   # the run goes on writing
    prepare(ws, _job(2), store)                            # a start resumed after a restart: kept
    assert step.read_text() == "8"
    release_inputs(ws)
    assert step.read_text() == "8", "the output is not an input"
    prepare(ws, _job(3), store)                            # a new attempt without a resume point
    assert list((ws / "output").iterdir()) == []


def test_a_checkpoint_is_none_for_an_empty_or_unchanged_output(store, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert checkpoint.save(out, store) is None
    (out / "model.pt").write_bytes(b"weights")
    first = checkpoint.save(out, store)
    assert first is not None and (first.files, first.size) == (1, 7)
    assert checkpoint.save(out, store, previous=first.tree) is None
    (out / "model.pt").write_bytes(b"better weights")
    assert checkpoint.save(out, store, previous=first.tree).tree != first.tree
