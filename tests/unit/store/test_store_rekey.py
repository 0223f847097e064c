"""Re-sealing a store under a new secret (floydd.store.keys.rekey): every id changes, nothing is
lost, a crash at any step resumes to the same end, refusals leave the old key working."""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from floydd.errors import Conflict, FloyddError, IntegrityError, NotFound, StoreError, StoreFull
from floydd.store import LocalBackend, ObjectId, Store, Tree, local
from floydd.store.keys import rekey, rekey_journal, reseal
from floydd.store.catalog import Catalog
from floydd.store.keys.crypto import Keys, read_secret
from floydd.store.locks import StoreLock
from floydd.store.objects import Objects
from store_testlib import count_rekey_steps, describe, flip_byte, object_files, write_tree

OLD = bytes(range(32))
NEW = bytes(range(100, 132))


class Crash(BaseException):
    """A kill at this instant (a BaseException: no ``except Exception`` may swallow it)."""


# -- the store of a box that was used alone ----------------------------------------------------

def _build(root: Path, src: Path, *, small_files: int = 120, big: int = 3 << 20) -> dict[str, Path]:
    """Datasets (two versions of one), a job output, a pinned code tree, a live upload lease,
    garbage (a deleted dataset), and a file whose bytes are a tree (that object is a chunk and a
    tree at once). Returns the source folder of each version ref."""
    rnd = random.Random(11)
    shared = rnd.randbytes(big)
    images = {"big.bin": shared, "mid.bin": rnd.randbytes(700 << 10), "empty/": 0o700, "a/b/c/": 0o755,
              "a/x.sh": (b"#!/bin/sh\n", 0o755), "zero": b"", "a/b/up@": "../x.sh", "top@": "a/b"}
    images.update({f"small/{i:03}.txt": rnd.randbytes(rnd.randint(1, 4000)) for i in range(small_files)})
    write_tree(src / "images", images)
    write_tree(src / "images2", {**images, "big.bin": shared[:-5] + b"tail!", "new/": 0o755})
    write_tree(src / "code", {"train.py": b"print('hi')\n", "lib/util.py": b"x = 1\n", "run@": "train.py"})
    write_tree(src / "out", {"model.pt": rnd.randbytes(300 << 10), "logs/": 0o755, "empty/": 0o755})
    write_tree(src / "lease", {"f": b"uploaded, not yet a version"})
    write_tree(src / "gone", {"g": rnd.randbytes(200 << 10)})
    os.mkdir(src / "blank")
    root.mkdir(mode=0o700)
    (root / "key").write_text(OLD.hex() + "\n")
    os.chmod(root / "key", 0o600)
    with Store.open(root) as s:
        s.upload(src / "images", "images")
        s.upload(src / "images2", "images", message="v2")
        s.upload(src / "out", "proj/3/output")
        s.upload(src / "blank", "blank")
        code = s.snapshot(src / "code")
        s.catalog.pin(code, "job:proj/3")
        s.snapshot(src / "lease")
        s.upload(src / "gone", "gone")
        s.catalog.delete("gone")
        write_tree(src / "treefile", {"t": s._objects.get(code)})
        s.upload(src / "treefile", "treefile")
        assert code in s.read_tree(s.catalog.resolve("treefile").tree).chunk_ids()
    return {"images:1": src / "images", "images:2": src / "images2", "proj/3/output:1": src / "out",
            "blank:1": src / "blank", "treefile:1": src / "treefile"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    base = tmp_path_factory.mktemp("rekey")
    sources = _build(base / "store", base / "src")
    return base / "store", sources


@pytest.fixture(scope="module")
def pristine_small(tmp_path_factory):
    base = tmp_path_factory.mktemp("rekey-small")
    _build(base / "store", base / "src", small_files=30, big=1200 << 10)
    return base / "store"


def _copy(store: Path, dest: Path) -> Path:
    shutil.copytree(store, dest)
    return dest


def _ids(root: Path) -> set[str]:
    return {p.name for p in object_files(root)}


def _catalog_rows(root: Path) -> tuple[list, list]:
    db = sqlite3.connect(root / "catalog.db")
    try:
        versions = db.execute("SELECT name, version, tree, created, size, files, message FROM versions "
                              "ORDER BY name, version").fetchall()
        pins = db.execute("SELECT holder, tree, expires FROM pins ORDER BY holder").fetchall()
    finally:
        db.close()
    return versions, pins


def _state(root: Path) -> tuple:
    """Everything a re-key's end state is made of."""
    return (read_secret(root / "key"), _ids(root), _catalog_rows(root), sorted(os.listdir(root)))


def _one_key_opens_the_catalog(root: Path) -> bool:
    """The invariant at every instant: the old key or the new one opens every tree the
    catalog names and every chunk of them."""
    versions, pins = _catalog_rows(root)
    trees = {ObjectId.from_hex(t) for t in [v[2] for v in versions] + [p[1] for p in pins]}
    backend = LocalBackend(root / "objects")
    for secret in (OLD, NEW):
        objects = Objects(backend, Keys(secret))
        try:
            for t in trees:
                for c in Tree.decode(objects.get(t)).chunk_ids():
                    objects.get(c)
            return True
        except FloyddError:
            continue
    return False


def _run(root: Path, **kw) -> dict[str, str]:
    assert rekey.begin_rekey(root, NEW)
    return rekey.rekey(root, **kw)


@pytest.fixture(scope="module")
def reference_small(pristine_small, tmp_path_factory):
    """One re-key without incident: its map and end state are what every crashed run must reach."""
    root = _copy(pristine_small, tmp_path_factory.mktemp("ref-small") / "store")
    mapping = _run(root)
    return mapping, _state(root)


# -- the happy path ---------------------------------------------------------------------------

def test_rekey_reseals_everything_and_keeps_every_version(pristine, tmp_path: Path):
    root = _copy(pristine[0], tmp_path / "store")
    old_ids = _ids(root)
    old_versions, old_pins = _catalog_rows(root)
    with Store.open(root) as s:
        roots = {t.hex for t in s.catalog.roots()}
    assert (root / "cache" / "files.db").exists()
    seen = []

    mapping = _run(root, progress=seen.append)

    # the map covers every root tree (versions, pins, the live lease), and only those
    assert set(mapping) == roots and len(set(mapping.values())) == len(roots)
    assert not set(mapping.values()) & old_ids
    # the key: the new secret, the old one gone (not archived), nothing pending but the map
    assert read_secret(root / "key") == NEW
    assert not (root / "key.next").exists()
    assert not [n for n in os.listdir(root) if n.startswith("key") and n != "key"]
    assert rekey.rekey_pending(root) and rekey.rekey(root) == mapping  # the same map again
    rekey.finish_rekey(root)
    assert not rekey.rekey_pending(root) and not (root / "rekey.db").exists()
    assert not (root / "cache" / "files.db").exists()
    # no object of the old key is left; every object opens under the new key and not the old
    new_ids = _ids(root)
    assert new_ids and not new_ids & old_ids
    new, old = Keys(NEW), Keys(OLD)
    for p in object_files(root):
        data, oid = p.read_bytes(), ObjectId.from_hex(p.name)
        new.check(oid, data, bytearray(len(data)))
        with pytest.raises(IntegrityError):
            old.open(oid, data)
    # the catalog: the same versions and pins, with the new tree ids
    versions, pins = _catalog_rows(root)
    assert versions == [(n, v, mapping[t], c, sz, f, m) for n, v, t, c, sz, f, m in old_versions]
    assert pins == [(h, mapping[t], e) for h, t, e in old_pins]
    # progress: the copy reached its totals, the drop removed the old objects (and the garbage)
    copies = [p for p in seen if p.phase == "copy"]
    assert copies[-1].objects_done == copies[-1].objects_total > 0
    assert copies[-1].bytes_done == copies[-1].bytes_total > 0
    drops = [p for p in seen if p.phase == "drop"]
    assert drops[-1].objects_done == drops[-1].objects_total == len(old_ids)
    assert len(new_ids) < len(old_ids) + 2  # garbage went; the tree-that-is-a-chunk is two objects now
    # every version restores byte-identical with the new key alone; verify, and gc keeps it all
    with Store.open(root) as s:
        for ref, src in pristine[1].items():
            dest = tmp_path / "out" / ref.replace("/", "_")
            s.restore(s.catalog.resolve(ref).tree, dest)
            assert describe(dest) == describe(src), ref
        assert s.verify().ok
        assert s.gc().removed_objects == 0
        code = s.read_tree(ObjectId.from_hex(mapping[old_pins[0][1]]))  # job:proj/3 pins the code tree
        assert {e.path for e in code.entries} == {"train.py", "lib", "lib/util.py", "run"}
        # the store works on; a file stored whole dedups against its re-sealed chunk (large
        # files do not: the chunker seed changed with the key, so they are cut elsewhere)
        again = s.read_tree(s.upload(pristine[1]["images:1"], "again").tree)
        rekeyed = s.read_tree(s.catalog.resolve("images:1").tree)
        assert _entry(again, "mid.bin").chunks == _entry(rekeyed, "mid.bin").chunks
        assert _entry(again, "big.bin").chunks != _entry(rekeyed, "big.bin").chunks
        assert s.verify().ok


def _entry(tree, path: str):
    return next(e for e in tree.entries if e.path == path)


def test_a_tree_that_is_also_a_chunk_gets_two_new_ids(pristine, tmp_path: Path):
    root = _copy(pristine[0], tmp_path / "store")
    with Store.open(root) as s:
        code = ObjectId.from_hex(dict((h, t) for h, t, _ in _catalog_rows(root)[1])["job:proj/3"])
        assert code in s.read_tree(s.catalog.resolve("treefile").tree).chunk_ids()
    mapping = _run(root)
    with Store.open(root) as s:
        new_code = ObjectId.from_hex(mapping[code.hex])
        (chunk,) = s.read_tree(s.catalog.resolve("treefile").tree).chunk_ids()
        assert chunk != new_code
        assert s._objects.get(chunk) == (pristine[1]["treefile:1"] / "t").read_bytes()  # the file, as it was
        assert s.read_tree(new_code).files == 2                                      # the tree, re-encoded


def test_nothing_pending_same_secret_and_a_fresh_store(tmp_path: Path):
    root = tmp_path / "store"
    with Store.open(root) as s:
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "f").write_bytes(b"x")
        s.upload(tmp_path / "src", "d")
    secret = read_secret(root / "key")
    assert not rekey.rekey_pending(root) and rekey.rekey(root) == {}
    assert rekey.begin_rekey(root, secret) is False and not rekey.rekey_pending(root)
    (root / "key.next").write_text(secret.hex() + "\n")  # written by hand: nothing to do either
    os.chmod(root / "key.next", 0o600)
    assert rekey.rekey(root) == {} and not rekey.rekey_pending(root)
    empty = tmp_path / "empty"
    Store.open(empty).close()
    assert _run(empty) == {}
    assert read_secret(empty / "key") == NEW
    Store.open(empty).close()
    with pytest.raises(NotFound) as e:
        rekey.begin_rekey(tmp_path / "nothing-here", NEW)
    assert "no store" in e.value.message


def test_begin_rekey_writes_key_next_and_refuses_another_secret(pristine, tmp_path: Path):
    root = _copy(pristine[0], tmp_path / "store")
    assert rekey.begin_rekey(root, NEW) is True
    assert (os.stat(root / "key.next").st_mode & 0o777) == 0o600
    assert read_secret(root / "key.next") == NEW
    assert rekey.begin_rekey(root, NEW) is True  # the same again: fine
    with pytest.raises(Conflict) as e:
        rekey.begin_rekey(root, bytes(32))
    assert "another re-key" in e.value.message and e.value.hint
    with pytest.raises(StoreError) as e:
        Store.open(root)
    assert e.value.code == "rekey_pending" and "floydd" in e.value.hint
    rekey.rekey(root)
    with pytest.raises(Conflict):  # the map is not yet taken
        rekey.begin_rekey(root, bytes(32))
    rekey.finish_rekey(root)
    assert rekey.begin_rekey(root, bytes(32)) is True


def test_a_catalog_of_another_key_is_refused(pristine, tmp_path: Path):
    root = _copy(pristine[0], tmp_path / "store")
    _run(root)
    rekey.finish_rekey(root)
    (root / "key").write_text(OLD.hex() + "\n")  # someone puts the old key file back
    with pytest.raises(StoreError) as e:
        Store.open(root)
    assert "another key" in e.value.message and e.value.hint


def test_remap_trees_is_all_or_nothing(store: Store, tmp_path: Path):
    write_tree(tmp_path / "a", {"f": b"a"})
    write_tree(tmp_path / "b", {"f": b"b"})
    a = store.upload(tmp_path / "a", "a").tree
    b = store.snapshot(tmp_path / "b")
    before = _catalog_rows(store.root)
    x, y = ObjectId(b"\x01" * 32), ObjectId(b"\x02" * 32)
    with pytest.raises(StoreError) as e:
        store.catalog.remap_trees({a: x}, fingerprint="f1")
    assert b.hex[:12] in e.value.message
    assert _catalog_rows(store.root) == before and store.catalog.key_fingerprint() is None
    assert store.catalog.remap_trees({a: x, b: y, y: a}, fingerprint="f1") == 2
    assert store.catalog.key_fingerprint() == "f1"
    versions, pins = _catalog_rows(store.root)
    assert [v[2] for v in versions] == [x.hex] and {p[1] for p in pins} == {y.hex}


# -- crashes ----------------------------------------------------------------------------------

def _arm(mp: pytest.MonkeyPatch, k: int) -> list[str]:
    """Crash right after the k-th step; every later step of the same 'process' crashes too."""
    steps: list[str] = []
    lock = threading.Lock()

    def after(name: str) -> None:
        with lock:
            steps.append(name)
            if len(steps) >= k:
                raise Crash(f"step {k}: {name}")
    count_rekey_steps(mp.setattr, after)
    return steps


def _count_steps(root: Path) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        steps: list[str] = []
        count_rekey_steps(mp.setattr, steps.append)
        _run(root)
    return steps


def _small_batches(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(rekey_journal, "PAGE", 4)     # several pages and commits even in a small store
    mp.setattr(reseal, "BATCH_BYTES", 300 << 10)


def _crash_points(steps: list[str]) -> list[int]:
    """The first, middle and last step of every run of steps of one kind (a crash after the
    5th of 16 removals is handled as one after the 6th)."""
    points, start = set(), 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or steps[i] != steps[start]:
            points.update({start + 1, (start + i + 1) // 2, i})
            start = i
    return sorted(points)


def test_a_crash_at_any_step_resumes_to_the_same_end(pristine_small, reference_small, tmp_path: Path):
    mapping_ref, state_ref = reference_small
    steps = _count_steps(_copy(pristine_small, tmp_path / "count"))
    assert {"save", "commit", "journal", "remap_trees", "_drop_cache", "_switch_key", "remove"} <= set(steps)
    points = _crash_points(steps)
    assert len(points) > 15
    for k in points:
        root = _copy(pristine_small, tmp_path / f"k{k}")
        with pytest.MonkeyPatch.context() as mp:
            _arm(mp, k)
            with pytest.raises(Crash):
                _run(root)
        assert rekey.rekey_pending(root)
        assert _one_key_opens_the_catalog(root), f"crash after step {k} ({steps[k - 1]})"
        if (root / "key.next").exists():
            with pytest.raises(StoreError):
                Store.open(root)
        assert rekey.rekey(root) == mapping_ref, f"crash after step {k} ({steps[k - 1]})"
        assert _state(root) == state_ref, f"crash after step {k} ({steps[k - 1]})"
        shutil.rmtree(root)


def test_crashes_during_resumes_too(pristine_small, reference_small, tmp_path: Path):
    mapping_ref, state_ref = reference_small
    rnd = random.Random(3)
    with pytest.MonkeyPatch.context() as mp:
        _small_batches(mp)
        total = len(_count_steps(_copy(pristine_small, tmp_path / "count")))
    for attempt in range(4):
        root = _copy(pristine_small, tmp_path / f"a{attempt}")
        for i, k in enumerate((rnd.randint(1, total - 1), rnd.randint(1, total // 2), rnd.randint(1, total // 4))):
            with pytest.MonkeyPatch.context() as mp:
                _small_batches(mp)
                _arm(mp, k)
                try:
                    _run(root) if i == 0 else rekey.rekey(root)
                except Crash:
                    pass
        assert rekey.rekey(root) == mapping_ref
        assert _state(root) == state_ref
        shutil.rmtree(root)


CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from store_testlib import count_rekey_steps
    from floydd.store.keys import rekey
    k, steps = int(sys.argv[2]), []
    def after(name):
        steps.append(name)
        if len(steps) == k:
            os.kill(os.getpid(), signal.SIGKILL)
    count_rekey_steps(setattr, after)
    rekey.rekey(Path(sys.argv[1]))
""")


def test_kill_9_at_some_steps_resumes_to_the_same_end(pristine_small, reference_small, tmp_path: Path):
    """A real kill: no finally blocks, temp files and an unclosed journal left behind."""
    mapping_ref, state_ref = reference_small
    total = len(_count_steps(_copy(pristine_small, tmp_path / "count")))
    here = str(Path(__file__).parent)
    for k in (total // 4, total // 2, 3 * total // 4, total - 1):
        root = _copy(pristine_small, tmp_path / f"k{k}")
        assert rekey.begin_rekey(root, NEW)
        proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(k), here], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert rekey.rekey(root) == mapping_ref
        assert _state(root) == state_ref


def test_cancel_before_the_key_switch_restores_the_old_store(pristine_small, tmp_path: Path):
    steps = _count_steps(_copy(pristine_small, tmp_path / "count"))
    switch = steps.index("_switch_key")
    before = _state(pristine_small)
    for k in sorted({1, switch // 2, steps.index("remap_trees") + 1, switch}):
        root = _copy(pristine_small, tmp_path / f"k{k}")
        with pytest.MonkeyPatch.context() as mp:
            _arm(mp, k)
            with pytest.raises(Crash):
                _run(root)
        assert rekey.cancel_rekey(root) is True
        assert _state(root) == before, f"cancel after step {k} ({steps[k - 1]})"
        assert not rekey.rekey_pending(root) and rekey.cancel_rekey(root) is False
        with Store.open(root) as s:
            assert s.verify().ok
    root = _copy(pristine_small, tmp_path / "late")
    with pytest.MonkeyPatch.context() as mp:
        _arm(mp, switch + 2)
        with pytest.raises(Crash):
            _run(root)
    with pytest.raises(Conflict) as e:
        rekey.cancel_rekey(root)
    assert "point of no return" in e.value.message
    rekey.rekey(root)


def test_key_next_removed_by_hand_calls_the_rekey_off(pristine_small, tmp_path: Path):
    steps = _count_steps(_copy(pristine_small, tmp_path / "count"))
    root = _copy(pristine_small, tmp_path / "store")
    with pytest.MonkeyPatch.context() as mp:
        _arm(mp, steps.index("remap_trees") + 1)  # the catalog names new trees now
        with pytest.raises(Crash):
            _run(root)
    (root / "key.next").unlink()
    assert rekey.rekey(root) == {}
    assert _state(root) == _state(pristine_small)


# -- refusals ---------------------------------------------------------------------------------

def _chunk_of(root: Path, ref: str) -> ObjectId:
    with Store.open(root) as s:
        tree = s.read_tree(s.catalog.resolve(ref).tree)
    return _entry(tree, "big.bin").chunks[1]


@pytest.mark.parametrize("what", ["chunk", "tree", "missing"])
def test_a_damaged_object_stops_the_rekey_and_the_old_key_goes_on(pristine, tmp_path: Path, what: str):
    root = _copy(pristine[0], tmp_path / "store")
    before = _state(root)
    if what == "tree":
        with Store.open(root) as s:
            oid = s.catalog.resolve("proj/3/output").tree
    else:
        oid = _chunk_of(root, "images:2")
    path = root / "objects" / oid.hex[:2] / oid.hex
    original = path.read_bytes()
    if what == "missing":
        path.unlink()
    else:
        flip_byte(path)
    with pytest.raises(IntegrityError) as e:
        _run(root)
    assert oid.short in e.value.message and "called off" in e.value.message
    assert ("proj/3/output:1" if what == "tree" else "images:2") in e.value.message
    assert "floyd data verify" in e.value.hint
    assert e.value.object == oid
    # the store is as it was, under its old key, and works
    assert not rekey.rekey_pending(root)
    assert _state(root)[0] == OLD and _catalog_rows(root) == before[2]
    assert _ids(root) == before[1] - ({oid.hex} if what == "missing" else set())
    with Store.open(root) as s:
        assert [d.object for d in s.verify().damaged] == [oid]
        s.restore(s.catalog.resolve("images:1").tree if what == "tree" else s.catalog.resolve("blank").tree,
                  tmp_path / "out")
    # repaired, the re-key goes through
    path.write_bytes(original)
    os.chmod(path, 0o600)
    assert _run(root)
    with Store.open(root) as s:
        assert s.verify().ok


def test_no_space_calls_the_rekey_off(pristine, tmp_path: Path, monkeypatch):
    root = _copy(pristine[0], tmp_path / "store")
    before = _state(root)
    usage = shutil.disk_usage(root)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=1 << 20))
    with pytest.raises(StoreFull) as e:
        _run(root)
    assert "called off" in e.value.message and "MiB" in e.value.message and e.value.hint
    assert _state(root) == before and not rekey.rekey_pending(root)
    monkeypatch.undo()

    real = local._write_all
    writes = []

    def fill_up(fd, data):  # the disk fills in the middle of the copy
        writes.append(1)
        if len(writes) > 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)
    monkeypatch.setattr(local, "_write_all", fill_up)
    with pytest.raises(StoreFull) as e:
        _run(root)
    assert "called off" in e.value.message
    assert _state(root) == before  # what the re-key wrote is gone, the old key works
    monkeypatch.undo()
    with Store.open(root) as s:
        assert s.verify().ok


def test_a_busy_store_is_refused(pristine_small, tmp_path: Path):
    root = _copy(pristine_small, tmp_path / "store")
    assert rekey.begin_rekey(root, NEW)
    with StoreLock(root / "locks" / "store.lock").shared():
        with pytest.raises(Conflict) as e:
            rekey.rekey(root, timeout=0.05)
        assert "in use" in e.value.message and "stop floydd" in e.value.hint
        with pytest.raises(Conflict):
            rekey.begin_rekey(root, NEW, timeout=0.05)
    assert not (root / "rekey.db").exists()
    assert rekey.rekey(root)


def test_finish_before_the_end_is_refused(pristine_small, tmp_path: Path):
    root = _copy(pristine_small, tmp_path / "store")
    with pytest.MonkeyPatch.context() as mp:
        _arm(mp, 3)
        with pytest.raises(Crash):
            _run(root)
    with pytest.raises(Conflict):
        rekey.finish_rekey(root)
    rekey.rekey(root)
    rekey.finish_rekey(root)
    rekey.finish_rekey(root)  # twice: fine
    assert not rekey.rekey_pending(root)


def test_a_catalog_changed_during_the_rekey_stops_the_switch(pristine_small, tmp_path: Path):
    """A pin added behind the re-key's back between a crash and the resume (Store.open is
    refused, a raw Catalog is not) names a tree the re-key did not re-seal: the catalog
    switch refuses and nothing changes; cancelled and begun again, the re-key takes it in."""
    steps = _count_steps(_copy(pristine_small, tmp_path / "count"))
    root = _copy(pristine_small, tmp_path / "store")
    versions, pins = _catalog_rows(root)
    named = {v[2] for v in versions} | {p[1] for p in pins}
    old = Objects(LocalBackend(root / "objects"), Keys(OLD))
    gone = next(ObjectId.from_hex(n) for n in sorted(_ids(root)) if n not in named and _is_tree(old, n))
    with pytest.MonkeyPatch.context() as mp:
        _arm(mp, steps.index("commit") + 1)  # planned, copying
        with pytest.raises(Crash):
            _run(root)
    cat = Catalog(root / "catalog.db", lambda t: (0, 0))
    cat.pin(gone, "job:late/1")  # the deleted dataset's tree, garbage when the re-key planned
    cat.close()
    with pytest.raises(StoreError) as e:
        rekey.rekey(root)
    assert "did not re-seal" in e.value.message and "cancel" in e.value.hint
    assert read_secret(root / "key") == OLD and rekey.rekey_pending(root)
    assert rekey.cancel_rekey(root)
    mapping = _run(root)
    assert gone.hex in mapping
    with Store.open(root) as s:
        assert s.read_tree(ObjectId.from_hex(mapping[gone.hex])).files == 1
        assert s.verify().ok


def _is_tree(objects: Objects, name: str) -> bool:
    try:
        Tree.decode(objects.get(ObjectId.from_hex(name)))
        return True
    except FloyddError:
        return False


def test_a_call_off_cut_short_is_finished_not_resumed(pristine_small, tmp_path: Path):
    def damaged_copy(name: str) -> tuple[Path, tuple]:
        root = _copy(pristine_small, tmp_path / name)
        with Store.open(root) as s:  # the chunk copied last (not a tree: those are read first)
            roots = set(s.catalog.roots())
            last = max(c for v in s.catalog.list() for c in s.read_tree(v.tree).chunk_ids() if c not in roots)
        flip_byte(root / "objects" / last.hex[:2] / last.hex)
        return root, _state(root)

    root, _ = damaged_copy("count")
    with pytest.MonkeyPatch.context() as mp:
        _small_batches(mp)  # earlier pages are durable before the damage is met
        steps: list[str] = []
        count_rekey_steps(mp.setattr, steps.append)
        with pytest.raises(IntegrityError):
            _run(root)
    removals = [i + 1 for i, name in enumerate(steps) if name == "remove"]
    assert len(removals) >= 2  # the call-off removed what the re-key had written
    for k in (removals[0], removals[-1]):
        root, before = damaged_copy(f"k{k}")
        with pytest.MonkeyPatch.context() as mp:
            _small_batches(mp)
            _arm(mp, k)
            with pytest.raises(Crash):
                _run(root)
        assert not (root / "key.next").exists() and rekey.rekey_pending(root)
        assert rekey.rekey(root) == {}
        assert _state(root) == before and not rekey.rekey_pending(root)


def test_a_store_opened_before_the_rekey_refuses_to_go_on(pristine_small, tmp_path: Path):
    """Another process's Store, opened under the old key and idle during the re-key, must
    not write old-key objects into (or misread) the re-keyed store afterwards."""
    root = _copy(pristine_small, tmp_path / "store")
    stale = Store.open(root)
    try:
        _run(root)
        write_tree(tmp_path / "src", {"f": b"late upload"})
        for call in (lambda: stale.snapshot(tmp_path / "src"), lambda: stale.verify(), lambda: stale.gc(),
                     lambda: stale.restore(ObjectId(b"\x00" * 32), tmp_path / "out")):
            with pytest.raises(StoreError) as e:
                call()
            assert "re-sealed under another key since it was opened" in e.value.message
    finally:
        stale.close()
    with Store.open(root) as s:
        assert s.verify().ok and s.gc().removed_objects == 0


def test_online_the_store_serves_under_the_new_key_while_the_old_objects_move(pristine_small, tmp_path: Path):
    """A joining box's daemon (issue 21): planned before it opens the store, then it uploads
    under the new key while the re-key runs under the shared lock; a stop between batches is
    resumed; gc waits; the versions added meanwhile are left as they are, the old ones remapped."""
    root = _copy(pristine_small, tmp_path / "store")
    versions_before, _ = _catalog_rows(root)
    assert rekey.begin_rekey(root, NEW) and rekey.plan_rekey(root)
    store = Store.open(root, during_rekey=True)
    try:
        write_tree(tmp_path / "late", {"f": b"uploaded while re-sealing" * 1000})
        late = store.upload(tmp_path / "late", "late")
        assert Keys(NEW).object_id(b"uploaded while re-sealing" * 1000) in store.read_tree(late.tree).chunk_ids()
        with pytest.raises(Conflict, match="gc waits"):
            store.gc()
        old_obj = next(p for p in object_files(root) if Keys(OLD).intact(ObjectId.from_hex(p.name), p.read_bytes()))
        assert store.check_object(ObjectId.from_hex(old_obj.name))[1] == ""      # the scrub knows old objects
        calls = [0]

        def stop_soon() -> bool:
            calls[0] += 1
            return calls[0] > 3
        with pytest.raises(rekey.Stopped):
            rekey.rekey(root, online=True, should_stop=stop_soon)
        assert (root / rekey.NEXT_KEY).exists()                     # stopped before the key switch
        mapping = rekey.rekey(root, online=True)
        rekey.finish_rekey(root)
        store.rekey_finished()
        assert read_secret(root / "key") == NEW and not rekey.rekey_pending(root)
        versions, _ = _catalog_rows(root)
        by_ref = {(v[0], v[1]): v[2] for v in versions}
        assert by_ref[("late", 1)] == late.tree.hex                 # added under the new key: untouched
        for name, number, tree, *_ in versions_before:
            assert by_ref[(name, number)] == mapping[tree]           # the old ones renamed
        restored = tmp_path / "out"
        store.restore(late.tree, restored)
        assert (restored / "f").read_bytes() == b"uploaded while re-sealing" * 1000
        assert store.verify().ok
    finally:
        store.close()
    with Store.open(root) as s:
        assert s.verify().ok and s.gc().removed_objects == 0
