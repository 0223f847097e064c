"""kill -9 an upload at random points: no corrupt object, and a re-run completes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from floydd.store import Store

CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from floydd.store import LocalBackend, Store
    from floydd.store import objects
    real = objects.Objects.writer
    objects.Objects.writer = lambda self, **kw: real(self, **{**kw, "checkpoint_bytes": 3 << 20})
    root, src, sync = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    store = Store.open(root, backend=LocalBackend(root / "objects", sync=sync))
    print(store.snapshot(src), flush=True)
""")


def _make_source(path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    for i in range(4):
        (path / "big").mkdir(parents=True, exist_ok=True)
        (path / "big" / f"f{i}").write_bytes(rnd.randbytes(6 << 20))
    for d in range(10):
        (path / f"small{d}").mkdir()
        for i in range(30):
            (path / f"small{d}" / f"{i}.txt").write_bytes(rnd.randbytes(rnd.randint(0, 60_000)))


def _entries(root: Path) -> list[str]:
    return [n for d in (root / "objects").iterdir() if d.is_dir() for n in os.listdir(d)]


def _run_child(root: Path, src: Path, sync: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(src), sync],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_when(proc: subprocess.Popen, cond, deadline_s: float = 60.0) -> bool:
    """Poll (no sleeps to synchronise) until cond() holds or the child exits; then SIGKILL."""
    deadline = time.monotonic() + deadline_s
    while proc.poll() is None and time.monotonic() < deadline:
        if cond():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.0005)
    proc.wait()
    return False


@pytest.mark.parametrize("sync", ["batch", "object"])
def test_killed_uploads_leave_no_corrupt_object_and_rerun_completes(tmp_path: Path, sync: str):
    src, root = tmp_path / "src", tmp_path / "store"
    _make_source(src, seed=1)
    Store.open(root).close()
    rnd = random.Random(sync)
    kills = 0
    for attempt in range(5):
        threshold = rnd.randint(1, 40)
        want_temp = attempt % 2 == 0
        proc = _run_child(root, src, sync)

        def cond():
            names = _entries(root)
            temps = sum(n.startswith(".tmp-") for n in names)
            return temps >= 1 if want_temp and threshold < 20 else len(names) >= threshold

        kills += _kill_when(proc, cond)
        # whatever was published is complete and authentic
        store = Store.open(root)
        report = store.verify()
        assert report.ok, report.to_dict()
        store.close()
    assert kills >= 3, "the child finished before it could be killed; make the source bigger"

    before = {n: os.stat(root / "objects" / n[:2] / n).st_ino for n in _entries(root) if not n.startswith(".")}
    proc = _run_child(root, src, sync)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    store = Store.open(root)
    tree = store.read_tree(__import__("floydd.store", fromlist=["ObjectId"]).ObjectId.from_hex(out.strip()))
    # published objects were reused, not written again
    after = {n: os.stat(root / "objects" / n[:2] / n).st_ino for n in _entries(root) if not n.startswith(".")}
    assert all(after[n] == ino for n, ino in before.items())
    assert store.verify().ok
    dest = tmp_path / "out"
    from floydd.store import ObjectId
    store.restore(ObjectId.from_hex(out.strip()), dest)
    for p in src.rglob("*"):
        if p.is_file():
            assert (dest / p.relative_to(src)).read_bytes() == p.read_bytes()
    assert tree.files == 4 + 300
    store.gc()
    assert not [n for n in _entries(root) if n.startswith(".tmp-")]
    store.close()
