"""Every operation of the daemon on a tree a job (or a person) controls, raced against a job
that swaps its folders and files for symlinks to a secret place, continuously, in a process
of its own (:mod:`._hostile_fs`): checkpoints, the final output save, a person's upload,
restores, the resumed /output's modes, the hand-over to the job user, clean-up and removal,
tar extraction. Each runs again and again while the swapper works; nothing the operation
made may hold a byte of the secrets, and nothing outside the tree may change. Errors are
allowed only as FloyddErrors (a clear message), never anything else.

Run with both resolvers: openat2, and the O_NOFOLLOW walk it falls back to.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from floydd.agent import jobuser
from floydd.agent.spec import AgentSpec, BindMount
from floydd.errors import FloyddError
from floydd.model import Mount, Run
from floydd.records import Records
from floydd.runtime import checkpoint, outputs, workspace
from floydd.runtime.disk import Disk
from floydd.runtime.watch import JobWatch
from floydd.security import beneath
from floydd.security.beneath import resolve
from floydd.store import Store
from floydd.store.tarball import unpack
from tests.integration.security._hostile_fs import NAMES, Secret, arm, refill, stored_plaintexts, swapping

RUN_FOR = 0.4        # seconds of racing per operation (and at least MIN_RUNS runs)
MIN_RUNS = 5


@pytest.fixture(params=["openat2", "fallback"])
def resolver(request, monkeypatch):
    if request.param == "openat2" and not beneath.openat2_available():
        pytest.skip("this kernel has no openat2")
    if request.param == "fallback":
        monkeypatch.setattr(resolve, "_use_openat2", False)
    return request.param


@pytest.fixture
def box(tmp_path, resolver):
    """A state folder with a store, a secret place next to it, and a job's workspace."""
    class Box:
        state = tmp_path / "state"
        store = Store.open(tmp_path / "state" / "store")
        secret = Secret(tmp_path / "secret")
        ws = workspace.job_dir(tmp_path / "state", "p", 1)
    Box.ws.mkdir(parents=True, mode=0o700)
    yield Box
    Box.store.close()


def _race(spec: dict, work: Path, op, *, allowed=(FloyddError,)) -> int:
    """Run ``op()`` while the swapper runs; how many runs ended without an error."""
    ok = runs = 0
    with swapping(spec, work) as swapper:
        deadline = time.monotonic() + RUN_FOR
        while runs < MIN_RUNS or time.monotonic() < deadline:
            runs += 1
            try:
                op()
                ok += 1
            except allowed:
                pass
    assert swapper["swaps"] > 100, "the swapper hardly ran: the race proves nothing"
    return ok


def _assert_no_secret_stored(box) -> None:
    leaked = [len(p) for p in stored_plaintexts(box.store) if box.secret.leaked(p)]
    assert leaked == [], f"{len(leaked)} stored objects hold the secret"


# -- reading a tree: snapshots ------------------------------------------------------------

def test_checkpoints_of_a_swapping_output_never_store_outside_files(box):
    out = box.ws / "output"
    out.mkdir()
    spec = arm(out, box.secret.folder)
    saved = _race(spec, box.state, lambda: checkpoint.save(out, box.store))
    _assert_no_secret_stored(box)
    assert saved > 0, "no checkpoint ever succeeded: the check above saw nothing stored"


def test_the_final_output_save_of_a_swapping_output_never_stores_outside_files(box):
    records = Records(box.state / "records.db")
    number = records.allocate_job("p", dict(command="true", params={}, code_tree="", data=[],
                                            resources={"gpus": 0}, env="default", max_runtime=None))
    ws = workspace.job_dir(box.state, "p", number)
    (ws / "output").mkdir(parents=True)
    spec = arm(ws / "output", box.secret.folder)
    watch = JobWatch(project="p", number=number, ws=ws, records=records, store=box.store, disk=Disk(box.state),
                     sample_interval=1.0, tail_interval=1.0, sampler=lambda pid: None)
    (ws / "job.log").touch()
    _race(spec, box.state, watch._save_output)
    _assert_no_secret_stored(box)
    events = [e["message"] for e in records.events("p", number) if e["kind"] == "output"]
    assert any(m.startswith("/output saved as") for m in events), events
    records.close()


def test_an_upload_of_a_folder_someone_else_swaps_never_stores_outside_files(box, tmp_path):
    folder = tmp_path / "alice-data"
    folder.mkdir()
    spec = arm(folder, box.secret.folder)
    _race(spec, box.state, lambda: box.store.snapshot(folder, ignore=outputs.screen(folder).ignore))
    _assert_no_secret_stored(box)


# -- writing a tree: restores and tar extraction -------------------------------------------

def _tree_of_a(box, tmp_path: Path) -> object:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for name in NAMES:
        (src / "a" / name).write_text(f"restored {name}\n")
    return box.store.snapshot(src)


def _hostile_names(dest: Path, outside: Path) -> dict:
    """The swapper's spec for a tree being written: ``a`` (made by the daemon) swapped with
    ``b`` -> ``outside``, an empty place that must stay empty."""
    return {"pairs": [[str(dest / "a"), str(dest / "b")]], "links": {str(dest / "b"): str(outside)}}


def test_restoring_nested_mounts_into_a_workspace_being_swapped_never_writes_outside(box, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "x").write_text("x")
    outer = str(box.store.snapshot(src))
    inner = str(_tree_of_a(box, tmp_path))
    empty_place = tmp_path / "empty-place"
    empty_place.mkdir()
    job = Run(project="p", number=1, state="starting", code_tree=None,
              data=(Mount(ref="a:1", mount="/input", tree=outer),
                    Mount(ref="b:1", mount="/input/sub/deep", tree=inner)))

    def prepare_once():
        parent = beneath.open_root(box.ws.parent)
        try:
            beneath.remove_tree(parent, box.ws.name)
        finally:
            os.close(parent)
        workspace.prepare(box.ws, job, box.store)
    spec = {"pairs": [[str(box.ws / "input" / "sub"), str(box.ws / "input" / "b")]],
            "links": {str(box.ws / "input" / "b"): str(empty_place)}}
    _race(spec, box.state, prepare_once, allowed=(FloyddError, OSError))
    assert list(empty_place.iterdir()) == []


def test_tar_extraction_into_a_folder_being_swapped_never_writes_outside(box, tmp_path):
    empty_place = tmp_path / "empty-place"
    empty_place.mkdir()
    dest = tmp_path / "dest"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in NAMES:
            data = f"unpacked {name}\n".encode()
            info = tarfile.TarInfo(f"a/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()

    def unpack_once():
        parent = beneath.open_root(tmp_path)
        try:
            beneath.remove_tree(parent, "dest")
        finally:
            os.close(parent)
        dest.mkdir()
        unpack(io.BytesIO(raw), dest)
    _race(_hostile_names(dest, empty_place), box.state, unpack_once)
    assert list(empty_place.iterdir()) == []


# -- changing a tree: modes, owners, clean-up ------------------------------------------------

def test_opening_up_a_resumed_output_never_changes_modes_outside(box, tmp_path):
    tree = str(_tree_of_a(box, tmp_path))
    before = box.secret.state()
    attempt = [0]

    def resume_once():
        attempt[0] += 1
        workspace.prepare(box.ws, Run(project="p", number=1, state="starting", attempt=attempt[0]), box.store,
                          resume=tree)
    _race(_hostile_names(box.ws / "output", box.secret.folder), box.state, resume_once,
          allowed=(FloyddError, OSError))
    assert box.secret.state() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the job user needs root (CI runs as root)")
def test_the_hand_over_to_the_job_user_never_chowns_outside(box):
    out = box.ws / "output"
    out.mkdir()
    spec = arm(out, box.secret.folder)
    before = box.secret.state()
    job = AgentSpec(job="p/1", command="true", uid=54321, gid=54321, mounts=(BindMount(source="input", target="/input"),))
    _race(spec, box.state, lambda: jobuser.hand_over(box.ws, job))
    assert box.secret.state() == before
    assert os.lstat(out / "c" if (out / "c").exists() and not (out / "c").is_symlink() else out / "d").st_uid == 54321


def test_clearing_inputs_and_removing_a_workspace_never_deletes_outside(box):
    before = box.secret.state()

    def clear_once():
        for name in ("input", "tmp"):
            refill(box.ws / name)
        (box.ws / ".prepared").write_text('{"/input": "x"}')
        workspace.release_inputs(box.ws)
        workspace.remove(box.ws)
        box.ws.mkdir(mode=0o700)
    spec = {"pairs": [[str(box.ws / n / "a"), str(box.ws / n / "b")] for n in ("input", "tmp")],
            "links": {str(box.ws / n / "b"): str(box.secret.folder) for n in ("input", "tmp")}}
    _race(spec, box.state, clear_once, allowed=(FloyddError, OSError))
    assert box.secret.state() == before
