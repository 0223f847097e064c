"""``floyd data verify NAME`` on a box holding no copy says so and names the boxes that do
(issue 21: it said the dataset did not exist). The route's check, over a catalog that lacks
the name here and a cluster catalog that has it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from floydd.api import keys
from floydd.api.datasets import _held_here
from floydd.errors import Conflict, NotFound


class _LocalCatalog:
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def resolve(self, ref: str):
        if ref.partition(":")[0] not in self.names:
            raise NotFound(f"no dataset {ref!r}")
        return {"ref": ref}


class _ClusterCatalog:
    def __init__(self, versions: list[dict]) -> None:
        self.versions = versions

    async def list(self, name=None, *, reader=None, everything=False):
        assert everything, "the daemon's own question: every version, whoever may read it"
        return [v for v in self.versions if v["name"] == name]


def _request(here: set[str], versions: list[dict]):
    app = {keys.STORE: SimpleNamespace(catalog=_LocalCatalog(here)), keys.DATASETS: _ClusterCatalog(versions),
           keys.CLUSTER: SimpleNamespace(node_id="n3", state=SimpleNamespace(nodes={"n3": {"name": "box3"}}))}
    return SimpleNamespace(app=app)


async def test_a_box_holding_no_copy_says_so_and_names_the_holders():
    versions = [{"name": "mnist", "version": 1, "held_by": ["box1", "box2"]},
                {"name": "mnist", "version": 2, "held_by": ["box2"]}]
    with pytest.raises(Conflict) as refused:
        await _held_here(_request(set(), versions), "mnist")
    assert refused.value.message == "box3 holds no copy of mnist; box1 and box2 do"
    assert refused.value.code == "not_held_here"
    assert "floyd data verify mnist on box1" in refused.value.hint


async def test_one_holder_a_lost_dataset_an_unknown_one_and_one_held_here():
    with pytest.raises(Conflict, match="^box3 holds no copy of mnist:2; box2 does$"):
        await _held_here(_request(set(), [{"name": "mnist", "version": 2, "held_by": ["box2"]}]), "mnist:2")
    with pytest.raises(Conflict, match="and no box does"):
        await _held_here(_request(set(), [{"name": "mnist", "version": 1, "held_by": []}]), "mnist")
    with pytest.raises(NotFound, match="no dataset 'cifar'"):
        await _held_here(_request(set(), []), "cifar")
    assert await _held_here(_request({"mnist"}, []), "mnist") is None
