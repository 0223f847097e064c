"""The background scrub (``floydd.store.care.scrub``) and reads that repair (``Store.repairer``)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from floydd.errors import IntegrityError, NotFound
from floydd.store import ObjectId, Store
from floydd.store.care.scrub import SCRUB_FILE, Scrub
from store_testlib import describe, flip_byte, write_tree


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _fill(store: Store, tmp_path: Path, files: int = 40) -> tuple[ObjectId, Path]:
    rnd = random.Random(7)
    src = tmp_path / "src"
    write_tree(src, {f"f{i:03d}.bin": rnd.randbytes(20_000 + i) for i in range(files)}
               | {"big.bin": rnd.randbytes(3 << 20)})
    return store.upload(src, "data").tree, src


def _path(store: Store, oid: ObjectId) -> Path:
    return store.root / "objects" / oid.hex[:2] / oid.hex


def test_a_pass_checks_every_object_in_id_order_within_its_budget_and_resumes_after_a_restart(store, tmp_path):
    _fill(store, tmp_path)
    everything = sorted(store.backend.list())
    damaged = everything[len(everything) // 2]
    flip_byte(_path(store, damaged))
    clock = Clock()
    scrub = Scrub(store, every=3600, save_every=0, clock=clock)
    assert scrub.due() == 0
    seen = []
    first = scrub.step(1)                       # a budget of one byte still checks one object
    assert first.checked_objects == 1 and first.checked_bytes > 0 and not first.pass_ended
    seen.append(scrub.state.after)
    saved = json.loads((store.root / SCRUB_FILE).read_text())
    assert saved["after"] == everything[0].hex and saved["pass"] == 1

    # A restart goes on from the saved cursor.
    scrub = Scrub(store, every=3600, save_every=0, clock=clock)
    found = []
    while True:
        result = scrub.step(200_000)
        assert result.checked_bytes < 200_000 + (5 << 20)        # one object past the budget at most
        found += [oid for oid, _why in result.damaged]
        if result.pass_ended:
            break
        seen.append(scrub.state.after)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert found == [damaged]
    last = scrub.state.last
    assert (last["pass"], last["objects"], last["damaged"]) == (1, len(everything), 1)
    assert last["bytes"] == sum(store.backend.stat(o) for o in everything)

    # The next pass waits for its time, then starts over.
    clock.now += 1000
    assert scrub.due() == pytest.approx(2600)
    clock.now += 2600
    assert scrub.due() == 0
    assert scrub.step(1).checked_objects == 1 and scrub.state.pass_ == 2


def test_objects_removed_meanwhile_are_skipped_and_a_damaged_progress_file_starts_over(store, tmp_path):
    _fill(store, tmp_path, files=5)
    scrub = Scrub(store, every=3600, save_every=0)
    scrub.step(1)
    gone = [o for o in sorted(store.backend.list()) if o.hex > scrub.state.after][0]
    store.backend.remove(gone)
    while not (result := scrub.step(1 << 30)).pass_ended:
        pass
    assert not result.damaged
    (store.root / SCRUB_FILE).write_text('{"pass": "x", "after": 3}')
    assert Scrub(store, every=3600).state.pass_ == 0


class Healer:
    """A repairer with a good copy of the store at hand (as another node would have)."""

    def __init__(self, good: Store) -> None:
        self.good = good
        self.healed: list[ObjectId] = []
        self.reported: list[ObjectId] = []

    def heal(self, oid: ObjectId, tree: ObjectId | None) -> bool:
        self.healed.append(oid)
        self.store.save_sealed(oid, self.good.load_sealed(oid))
        return True

    def damaged(self, oid: ObjectId) -> None:
        self.reported.append(oid)


def test_a_restore_that_meets_a_damaged_or_missing_object_repairs_it_and_reads_on(store, tmp_path):
    tree, src = _fill(store, tmp_path, files=3)
    shutil.copytree(store.root, tmp_path / "good")
    good = Store.open(tmp_path / "good")
    try:
        chunks = sorted(store.read_tree(tree).chunk_ids())
        flip_byte(_path(store, chunks[0]))
        _path(store, chunks[1]).unlink()
        with pytest.raises((IntegrityError, NotFound)):         # whichever the restore meets first
            store.restore(tree, tmp_path / "plain")            # no repairer: the read fails, as before

        store.repairer = healer = Healer(good)
        healer.store = store
        store.restore(tree, tmp_path / "out")
        assert describe(tmp_path / "out") == describe(src)
        assert set(healer.healed) == {chunks[0], chunks[1]}
        assert store.verify().ok                                 # the local copies are whole again
    finally:
        good.close()


def test_a_damaged_object_is_never_sent_to_a_peer_and_is_reported(store, tmp_path):
    tree, _src = _fill(store, tmp_path, files=2)
    chunk = sorted(store.read_tree(tree).chunk_ids())[0]
    assert store.load_sealed(chunk, verify=True) == store.load_sealed(chunk)
    flip_byte(_path(store, chunk))
    store.repairer = healer = Healer(store)
    with pytest.raises(IntegrityError, match="a good copy is being fetched"):
        store.load_sealed(chunk, verify=True)
    assert healer.reported == [chunk]
