"""``Catalog.add_version(number=N)``: mirroring a version the cluster numbered."""

from __future__ import annotations

from pathlib import Path

import pytest

from floydd.errors import Conflict, InvalidName, NotFound
from floydd.store import Store
from floydd.store.catalog import dataset_not_found, parse_ref


@pytest.fixture
def trees(store: Store, tmp_path: Path):
    """Three trees of one file of 1, 2 and 3 bytes."""
    (tmp_path / "src").mkdir()
    made = []
    for content in (b"y", b"yy", b"yyy"):
        (tmp_path / "src" / "f").write_bytes(content)
        made.append(store.snapshot(tmp_path / "src"))
    return made


def test_an_explicit_number_is_kept_and_later_versions_count_on_from_it(store: Store, trees):
    v5 = store.catalog.add_version("mnist", trees[0], message="from the cluster", number=5)
    assert (v5.ref, v5.message, v5.size) == ("mnist:5", "from the cluster", 1)
    assert store.catalog.resolve("mnist") == v5
    assert store.catalog.add_version("mnist", trees[1], number=3).version == 3     # seen late: fine
    assert store.catalog.add_version("mnist", trees[2]).version == 6
    assert [v.version for v in store.catalog.list("mnist")] == [3, 5, 6]


def test_mirroring_the_same_version_again_is_a_no_op_and_drops_its_lease(store: Store, trees):
    first = store.catalog.add_version("d", trees[0], number=2)
    store.catalog.pin(trees[0], "upload:again", ttl_s=60)
    assert store.catalog.add_version("d", trees[0], number=2) == first
    assert store.catalog.roots()[trees[0]] == ["d:2"]
    assert len(store.catalog.list("d")) == 1


def test_another_tree_under_a_taken_number_is_a_conflict(store: Store, trees):
    store.catalog.add_version("d", trees[0])
    with pytest.raises(Conflict) as e:
        store.catalog.add_version("d", trees[1], number=1)
    assert e.value.hint
    assert store.catalog.resolve("d:1").tree == trees[0]


@pytest.mark.parametrize("number", [0, -1, True, "2"])
def test_a_number_must_be_a_positive_integer(store: Store, trees, number):
    with pytest.raises(InvalidName):
        store.catalog.add_version("d", trees[0], number=number)
    assert store.catalog.list() == []


def test_parse_ref_and_not_found_hints():
    assert parse_ref("mnist") == ("mnist", None)
    assert parse_ref("mnist:latest") == ("mnist", None)
    assert parse_ref("mnist/3/output:2") == ("mnist/3/output", 2)
    with pytest.raises(InvalidName):
        parse_ref("mnist:02")
    e = dataset_not_found("mnist", 9, [3, 1, 2], [])
    assert isinstance(e, NotFound) and e.hint == "versions of mnist: mnist:1, mnist:2, mnist:3"
    assert "digits" in dataset_not_found("cifar", None, [], ["digits", "mnist"]).hint
    assert "upload" in dataset_not_found("cifar", None, [], []).hint
